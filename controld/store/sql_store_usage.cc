// SqlStore: reading hourly usage back (the writes are addUsage, in sql_store_limits.cc). One
// range scan of the primary key (tunnel_id, hour_start), so a tunnel's 30 days cost 720 rows at
// most, whatever the table holds for other tunnels.
#include <soci/soci.h>

#include "controld/store/sql_store.h"

namespace ot::controld {

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
                            " AND hour_start < :to_ms ORDER BY hour_start",
             soci::into(hour), soci::into(in), soci::into(out), soci::into(connections),
             soci::use(tunnelId), soci::use(from), soci::use(to));
        rows.execute();
        std::vector<UsageHour> hours;
        while (rows.fetch()) hours.push_back(UsageHour{hour, in, out, connections});
        return hours;
      });
}

}  // namespace ot::controld
