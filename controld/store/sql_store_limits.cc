// SqlStore: cluster-wide rate limits (GCRA in the rate_limits table). Hourly usage is in
// sql_store_usage.cc.
//
// GCRA keeps, per key, the time its budget is full again (full_at). A request at `now` passes
// while full_at - now <= (burst - 1) * interval, and moves full_at to max(full_at, now) +
// interval. Both the test and the move are one conditional UPDATE, so any number of controlds
// hammering one key never pass more than the budget; a key not seen before is INSERTed.
#include <soci/soci.h>

#include "controld/store/sql_store.h"

namespace ot::controld {
namespace {

// An INSERT that loses to a concurrent INSERT of the same key goes back to the UPDATE; one more
// round always settles it, a few bound it.
constexpr int kRateRounds = 4;

}  // namespace

Result<RateDecision> SqlStore::acquireRate(const std::string& key, int64_t nowMs,
                                           int64_t intervalMs, int64_t burst) {
  if (intervalMs < 1 || burst < 1) {
    return Error{ErrorKind::kInvalid, "a rate needs interval >= 1 ms and burst >= 1"};
  }
  return run<RateDecision>("acquireRate", [&](soci::session& sql) -> Result<RateDecision> {
    long long now = nowMs;
    long long interval = intervalMs;
    long long limit = nowMs + (burst - 1) * intervalMs;
    for (int round = 0; round < kRateRounds; ++round) {
      soci::statement update =
          (sql.prepare << "UPDATE rate_limits SET full_at ="
                          " (CASE WHEN full_at > :now THEN full_at ELSE :now_again END) + :interval"
                          " WHERE k = :k AND full_at <= :limit",
           soci::use(now), soci::use(now), soci::use(interval), soci::use(key), soci::use(limit));
      update.execute(true);
      if (update.get_affected_rows() == 1) return RateDecision{true, 0};

      long long fullAt = 0;
      soci::statement select = (sql.prepare << "SELECT full_at FROM rate_limits WHERE k = :k",
                                soci::into(fullAt), soci::use(key));
      if (select.execute(true)) {
        // Refused while full_at is past the limit. (It may have dropped since the UPDATE only if
        // the row was pruned and re-added; then try again.)
        if (fullAt > limit) return RateDecision{false, fullAt - limit};
        continue;
      }
      long long first = nowMs + intervalMs;
      try {
        sql << "INSERT INTO rate_limits (k, full_at) VALUES (:k, :full_at)", soci::use(key),
            soci::use(first);
        return RateDecision{true, 0};
      } catch (const soci::soci_error& error) {
        if (!isDuplicateKey(error)) throw;
      }
    }
    return Error{ErrorKind::kConflict, "rate key " + key + " kept changing underneath"};
  });
}

Result<int64_t> SqlStore::pruneRates(int64_t nowMs, int limit) {
  if (limit < 1) return Error{ErrorKind::kInvalid, "a prune needs a limit >= 1"};
  return run<int64_t>("pruneRates", [&](soci::session& sql) -> Result<int64_t> {
    // A row whose budget is already full again carries no information. Bounded, so one pass
    // holds its locks briefly however large the backlog; rate_limits_full_at finds the rows.
    long long now = nowMs;
    const std::string bound = std::to_string(limit);
    const std::string remove =
        dialect_ == SqlDialect::kMysql
            ? "DELETE FROM rate_limits WHERE full_at <= :now ORDER BY full_at LIMIT " + bound
            // SQLite has DELETE ... LIMIT only when built with SQLITE_ENABLE_UPDATE_DELETE_LIMIT.
            : "DELETE FROM rate_limits WHERE rowid IN (SELECT rowid FROM rate_limits"
              " WHERE full_at <= :now ORDER BY full_at LIMIT " +
                  bound + ")";
    soci::statement st = (sql.prepare << remove, soci::use(now));
    st.execute(true);
    return int64_t{st.get_affected_rows()};
  });
}

}  // namespace ot::controld
