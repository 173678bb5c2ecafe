// SqlStore: hourly usage, the tunnel's totals (origin '') and its named origins' shares
// (docs/pools-usage.md). Writes add to a row (several relays and controlds report the same
// hour); reads are one range scan of the primary key (tunnel_id, hour_start, origin), so a
// tunnel's 30 days cost 720 rows per origin at most, whatever the table holds for other tunnels.
#include <soci/soci.h>

#include "controld/store/sql_store.h"

namespace ot::controld {
namespace {

void upsertUsage(soci::session& sql, SqlDialect dialect, const std::string& tunnelId,
                 int64_t hourStartMs, const std::string& origin, int64_t bytesIn, int64_t bytesOut,
                 int64_t connections) {
  const char* upsert =
      dialect == SqlDialect::kMysql
          ? "INSERT INTO usage_hourly"
            " (tunnel_id, hour_start, origin, bytes_in, bytes_out, connections)"
            " VALUES (:tunnel_id, :hour_start, :origin, :bytes_in, :bytes_out, :connections)"
            " ON DUPLICATE KEY UPDATE bytes_in = bytes_in + VALUES(bytes_in),"
            " bytes_out = bytes_out + VALUES(bytes_out),"
            " connections = connections + VALUES(connections)"
          : "INSERT INTO usage_hourly"
            " (tunnel_id, hour_start, origin, bytes_in, bytes_out, connections)"
            " VALUES (:tunnel_id, :hour_start, :origin, :bytes_in, :bytes_out, :connections)"
            " ON CONFLICT (tunnel_id, hour_start, origin) DO UPDATE SET"
            " bytes_in = bytes_in + excluded.bytes_in,"
            " bytes_out = bytes_out + excluded.bytes_out,"
            " connections = connections + excluded.connections";
  long long hourStart = hourStartMs;
  long long in = bytesIn;
  long long out = bytesOut;
  long long count = connections;
  sql << upsert, soci::use(tunnelId), soci::use(hourStart), soci::use(origin), soci::use(in),
      soci::use(out), soci::use(count);
}

}  // namespace

Status SqlStore::addUsage(const std::string& tunnelId, int64_t hourStartMs, int64_t bytesIn,
                          int64_t bytesOut, int64_t connections) {
  return run<Ok>("addUsage", [&](soci::session& sql) -> Result<Ok> {
    upsertUsage(sql, dialect_, tunnelId, hourStartMs, "", bytesIn, bytesOut, connections);
    return Ok{};
  });
}

Status SqlStore::addOriginUsage(const std::string& tunnelId, int64_t hourStartMs,
                                const std::string& origin, int64_t bytesIn, int64_t bytesOut,
                                int64_t connections) {
  if (origin.empty()) return Error{ErrorKind::kInvalid, "an origin's usage needs its name"};
  return run<Ok>("addOriginUsage", [&](soci::session& sql) -> Result<Ok> {
    upsertUsage(sql, dialect_, tunnelId, hourStartMs, origin, bytesIn, bytesOut, connections);
    return Ok{};
  });
}

Result<std::vector<UsageHour>> SqlStore::usageHours(const std::string& tunnelId, int64_t fromMs,
                                                    int64_t toMs) {
  return run<std::vector<UsageHour>>(
      "usageHours", [&](soci::session& sql) -> Result<std::vector<UsageHour>> {
        long long from = fromMs;
        long long to = toMs;
        long long hour = 0;
        long long in = 0;
        long long out = 0;
        long long connections = 0;
        soci::statement rows =
            (sql.prepare << "SELECT hour_start, bytes_in, bytes_out, connections FROM usage_hourly"
                            " WHERE tunnel_id = :tunnel_id AND hour_start >= :from_ms"
                            " AND hour_start < :to_ms AND origin = '' ORDER BY hour_start",
             soci::into(hour), soci::into(in), soci::into(out), soci::into(connections),
             soci::use(tunnelId), soci::use(from), soci::use(to));
        rows.execute();
        std::vector<UsageHour> hours;
        while (rows.fetch()) hours.push_back(UsageHour{hour, in, out, connections});
        return hours;
      });
}

Result<std::vector<UsageOriginHour>> SqlStore::usageOriginHours(const std::string& tunnelId,
                                                                int64_t fromMs, int64_t toMs) {
  return run<std::vector<UsageOriginHour>>(
      "usageOriginHours", [&](soci::session& sql) -> Result<std::vector<UsageOriginHour>> {
        long long from = fromMs;
        long long to = toMs;
        std::string origin;
        long long hour = 0;
        long long in = 0;
        long long out = 0;
        long long connections = 0;
        soci::statement rows =
            (sql.prepare << "SELECT origin, hour_start, bytes_in, bytes_out, connections"
                            " FROM usage_hourly WHERE tunnel_id = :tunnel_id"
                            " AND hour_start >= :from_ms AND hour_start < :to_ms AND origin <> ''"
                            " ORDER BY origin, hour_start",
             soci::into(origin), soci::into(hour), soci::into(in), soci::into(out),
             soci::into(connections), soci::use(tunnelId), soci::use(from), soci::use(to));
        rows.execute();
        std::vector<UsageOriginHour> hours;
        while (rows.fetch()) hours.push_back(UsageOriginHour{origin, hour, in, out, connections});
        return hours;
      });
}

}  // namespace ot::controld
