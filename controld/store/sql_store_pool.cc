// SqlStore: the pool's upkeep. Every poolUpkeepIntervalMs it looks at each idle session (one at a
// time, so callers keep the others) and closes those the server ended (a KILL, its wait_timeout,
// a restart), those at their maximum lifetime and those idle too long beyond the minimum; then it
// opens sessions until the minimum is open again. So a pool that lost its connections is whole
// again within one interval, before callers need it, and no session outlives a server-side
// change (a failover, a new password) by more than its lifetime.
#include <soci/session.h>

#include <chrono>

#include "common/log.h"
#include "controld/store/sql_store.h"

namespace ot::controld {
namespace {

const log::Logger kSqlStorePoolLog("controld.store");

// Gives a borrowed slot back however the round leaves it, its idle time running on.
struct Borrowed {
  SessionPool& pool;
  std::size_t slot;
  ~Borrowed() { pool.releaseUntouched(slot); }
};

}  // namespace

void SqlStore::closeSession(soci::session& sql) {
  try {
    sql.close();
  } catch (const std::exception&) {
    // Closing a dead connection may complain; it is closed either way.
  }
  --open_;
}

void SqlStore::startPoolUpkeep() {
  upkeep_.start();
}

std::chrono::milliseconds SqlStore::upkeepRound() {
  const auto started = std::chrono::steady_clock::now();
  const PoolUpkeepReport report = maintainPool(started);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started);
  if (report.lost > 0 || report.recycled > 0 || report.idleClosed > 0) {
    kSqlStorePoolLog.debug(
        "closed database connections",
        {{"lost", report.lost}, {"recycled", report.recycled}, {"idle", report.idleClosed}});
  }
  if (report.opened > 0) {
    kSqlStorePoolLog.info(
        "opened idle database connections",
        {{"opened", report.opened}, {"open", open_.load()}, {"ms", took.count()}});
  }
  if (!report.error.empty()) {
    kSqlStorePoolLog.warn(
        "could not open idle database connections",
        {{"opened", report.opened}, {"error", report.error}, {"ms", took.count()}});
  }
  return std::chrono::milliseconds(options_.poolUpkeepIntervalMs);
}

PoolUpkeepReport SqlStore::maintainPool(PoolTime now) {
  PoolUpkeepReport report;
  for (std::size_t slot = 0; slot < pool_.size(); ++slot) {
    if (!pool_.tryAcquire(slot)) continue;  // lent to a caller
    const Borrowed borrowed{pool_, slot};
    soci::session& sql = pool_.session(slot);
    if (sql.get_backend() == nullptr) continue;
    if (serverEndedSession(sql)) {
      closeSession(sql);
      ++report.lost;
      continue;
    }
    const auto open = static_cast<std::size_t>(std::max<int64_t>(0, open_.load()));
    switch (idleVerdict(pool_.times(slot), now, open, limits_)) {
      case IdleVerdict::kKeep:
        break;
      case IdleVerdict::kRecycle:
        closeSession(sql);
        ++report.recycled;
        break;
      case IdleVerdict::kCloseIdle:
        closeSession(sql);
        ++report.idleClosed;
        break;
    }
  }
  // Top up: open closed free slots until min_idle sessions are open. The first failure ends the
  // round (the database is likely down; the next round tries again).
  for (std::size_t slot = 0; slot < pool_.size(); ++slot) {
    if (open_.load() >= static_cast<int64_t>(limits_.minIdle) || upkeep_.stopping()) break;
    if (!pool_.tryAcquire(slot)) continue;
    const Borrowed borrowed{pool_, slot};
    soci::session& sql = pool_.session(slot);
    if (sql.get_backend() != nullptr) continue;
    try {
      const Status connected = connect(sql);
      if (!connected) {
        report.error = connected.error().message;
        break;
      }
    } catch (const std::exception& error) {
      report.error = classifySqlFailure(error).message;
      break;
    }
    ++open_;
    // The round's clock throughout, so a round run with a later `now` (tests) stays consistent.
    pool_.times(slot).openedAt = now;
    pool_.times(slot).idleSince = now;
    ++report.opened;
  }
  return report;
}

}  // namespace ot::controld
