// SqlStore: tunnel rows and renewal alarms. The record column holds toJson() exactly; deleted,
// issuing and alarm_at are derived from the record on every write so queries need not parse
// JSON. Every write names the revision it read.
#include <soci/soci.h>

#include "controld/store/sql_store.h"

namespace ot::controld {
namespace {

struct DerivedColumns {
  int deleted = 0;
  int issuing = 0;
  long long alarmAt = 0;
  soci::indicator alarmIndicator = soci::i_null;
};

// A deleted tunnel renews nothing, so its alarm is cleared whatever renewAt says.
DerivedColumns deriveColumns(const TunnelRecord& record) {
  DerivedColumns columns;
  columns.deleted = record.deleted() ? 1 : 0;
  columns.issuing = record.issuing() ? 1 : 0;
  if (record.renewAtMs && !record.deleted()) {
    columns.alarmAt = *record.renewAtMs;
    columns.alarmIndicator = soci::i_ok;
  }
  return columns;
}

Result<StoredTunnel> decodeRow(const std::string& id, const std::string& json, long long revision) {
  auto record = tunnelRecordFromJson(json);
  if (!record) {
    return Error{ErrorKind::kInternal,
                 "stored record of tunnel " + id + " is unreadable: " + record.error().message};
  }
  return StoredTunnel{std::move(record).value(), revision};
}

// Runs a prepared SELECT of (id, record, revision) and decodes every row.
Result<std::vector<StoredTunnel>> fetchTunnels(soci::statement& st, const std::string& id,
                                               const std::string& json, const long long& revision) {
  std::vector<StoredTunnel> tunnels;
  st.execute();
  while (st.fetch()) {
    auto tunnel = decodeRow(id, json, revision);
    if (!tunnel) return tunnel.error();
    tunnels.push_back(std::move(tunnel).value());
  }
  return tunnels;
}

}  // namespace

Result<int64_t> SqlStore::insertTunnel(const TunnelRecord& record) {
  if (!isValidTunnelId(record.id)) {
    return Error{ErrorKind::kInvalid, "invalid tunnel ID: " + record.id};
  }
  return run<int64_t>("insertTunnel", [&](soci::session& sql) -> Result<int64_t> {
    const std::string json = toJson(record);
    DerivedColumns columns = deriveColumns(record);
    long long revision = 1;
    int localUpdate = 1;
    try {
      sql << "INSERT INTO tunnels (id, record, revision, deleted, issuing, alarm_at, local_update)"
             " VALUES (:id, :record, :revision, :deleted, :issuing, :alarm_at, :local_update)",
          soci::use(record.id), soci::use(json), soci::use(revision), soci::use(columns.deleted),
          soci::use(columns.issuing), soci::use(columns.alarmAt, columns.alarmIndicator),
          soci::use(localUpdate);
    } catch (const soci::soci_error& error) {
      if (isDuplicateKey(error)) {
        return Error{ErrorKind::kConflict, "tunnel " + record.id + " already exists"};
      }
      throw;
    }
    return int64_t{1};
  });
}

Result<std::optional<StoredTunnel>> SqlStore::getTunnel(const std::string& id) {
  return run<std::optional<StoredTunnel>>(
      "getTunnel", [&](soci::session& sql) -> Result<std::optional<StoredTunnel>> {
        std::string json;
        long long revision = 0;
        soci::statement st = (sql.prepare << "SELECT record, revision FROM tunnels WHERE id = :id",
                              soci::into(json), soci::into(revision), soci::use(id));
        if (!st.execute(true)) return std::optional<StoredTunnel>{};
        auto tunnel = decodeRow(id, json, revision);
        if (!tunnel) return tunnel.error();
        return std::optional<StoredTunnel>{std::move(tunnel).value()};
      });
}

Result<int64_t> SqlStore::updateTunnel(const TunnelRecord& record, int64_t expectedRevision) {
  return run<int64_t>("updateTunnel", [&](soci::session& sql) -> Result<int64_t> {
    const std::string json = toJson(record);
    DerivedColumns columns = deriveColumns(record);
    long long expected = expectedRevision;
    soci::statement st =
        (sql.prepare << "UPDATE tunnels SET record = :record, revision = revision + 1,"
                        " deleted = :deleted, issuing = :issuing, alarm_at = :alarm_at,"
                        " local_update = 1 WHERE id = :id AND revision = :expected",
         soci::use(json), soci::use(columns.deleted), soci::use(columns.issuing),
         soci::use(columns.alarmAt, columns.alarmIndicator), soci::use(record.id),
         soci::use(expected));
    st.execute(true);
    if (st.get_affected_rows() != 1) {
      return Error{ErrorKind::kConflict, "tunnel " + record.id + " is no longer at revision " +
                                             std::to_string(expectedRevision)};
    }
    return int64_t{expectedRevision + 1};
  });
}

Result<std::vector<StoredTunnel>> SqlStore::listTunnels(const std::string& afterId, int limit) {
  if (limit < 1) return Error{ErrorKind::kInvalid, "listTunnels limit must be >= 1"};
  return run<std::vector<StoredTunnel>>(
      "listTunnels", [&](soci::session& sql) -> Result<std::vector<StoredTunnel>> {
        std::string id;
        std::string json;
        long long revision = 0;
        soci::statement st =
            (sql.prepare << "SELECT id, record, revision FROM tunnels WHERE id > :after"
                            " ORDER BY id LIMIT :limit",
             soci::into(id), soci::into(json), soci::into(revision), soci::use(afterId),
             soci::use(limit));
        return fetchTunnels(st, id, json, revision);
      });
}

Result<std::vector<StoredTunnel>> SqlStore::directTunnels(const std::string& afterId, int limit) {
  if (limit < 1) return Error{ErrorKind::kInvalid, "directTunnels limit must be >= 1"};
  return run<std::vector<StoredTunnel>>(
      "directTunnels", [&](soci::session& sql) -> Result<std::vector<StoredTunnel>> {
        std::string id;
        std::string json;
        long long revision = 0;
        // A text match on the compact JSON an origin's target is written as (tunnel_record.cc);
        // a route or name that happens to contain it is a false hit the caller drops.
        soci::statement st =
            (sql.prepare << "SELECT id, record, revision FROM tunnels WHERE id > :after"
                            " AND deleted = 0 AND record LIKE '%\"direct\":{%'"
                            " ORDER BY id LIMIT :limit",
             soci::into(id), soci::into(json), soci::into(revision), soci::use(afterId),
             soci::use(limit));
        return fetchTunnels(st, id, json, revision);
      });
}

Result<std::vector<StoredTunnel>> SqlStore::dueAlarms(int64_t nowMs, int limit) {
  if (limit < 1) return Error{ErrorKind::kInvalid, "dueAlarms limit must be >= 1"};
  return run<std::vector<StoredTunnel>>(
      "dueAlarms", [&](soci::session& sql) -> Result<std::vector<StoredTunnel>> {
        std::string id;
        std::string json;
        long long revision = 0;
        long long now = nowMs;
        soci::statement st = (sql.prepare << "SELECT id, record, revision FROM tunnels"
                                             " WHERE alarm_at IS NOT NULL AND alarm_at <= :now"
                                             " ORDER BY alarm_at, id LIMIT :limit",
                              soci::into(id), soci::into(json), soci::into(revision),
                              soci::use(now), soci::use(limit));
        return fetchTunnels(st, id, json, revision);
      });
}

Result<bool> SqlStore::clearAlarm(const std::string& id, int64_t alarmAtMs) {
  return run<bool>("clearAlarm", [&](soci::session& sql) -> Result<bool> {
    long long alarmAt = alarmAtMs;
    soci::statement st =
        (sql.prepare
             << "UPDATE tunnels SET alarm_at = NULL WHERE id = :id AND alarm_at = :alarm_at",
         soci::use(id), soci::use(alarmAt));
    st.execute(true);
    return st.get_affected_rows() == 1;
  });
}

}  // namespace ot::controld
