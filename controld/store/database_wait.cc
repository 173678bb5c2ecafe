#include "controld/store/database_wait.h"

#include <algorithm>

#include "common/log.h"

namespace ot::controld {
namespace {

const log::Logger kDatabaseWaitLog("controld");

}  // namespace

DatabaseWaitOutcome waitForDatabase(const DatabaseWaitOptions& options,
                                    const DatabaseWaitHooks& hooks) {
  const int64_t started = hooks.nowMs();
  int64_t delayMs = std::max<int64_t>(1, options.firstDelayMs);
  for (int attempt = 1;; ++attempt) {
    const Status migrated = hooks.attempt();
    if (migrated.ok()) {
      kDatabaseWaitLog.info("connected to the database", {{"attempt", attempt}});
      return DatabaseWaitOutcome::kReady;
    }
    const Error& error = migrated.error();
    if (error.kind == ErrorKind::kInvalid) {
      kDatabaseWaitLog.error("the database cannot be used", {{"error", error.message}});
      return DatabaseWaitOutcome::kUnusable;
    }
    const int64_t waited = hooks.nowMs() - started;
    int64_t sleepMs = delayMs;
    if (options.timeoutMs != 0) {
      const int64_t left = options.timeoutMs - waited;
      if (left <= 0) {
        kDatabaseWaitLog.error("the database is not available, exiting with the last error",
                               {{"error", error.message}, {"waited_ms", waited}});
        return DatabaseWaitOutcome::kTimedOut;
      }
      sleepMs = std::min(sleepMs, left);
    }
    kDatabaseWaitLog.warn(
        "waiting for the database",
        {{"attempt", attempt}, {"error", error.message}, {"retry_in_ms", sleepMs}});
    if (hooks.sleepOrStop(sleepMs)) return DatabaseWaitOutcome::kStopped;
    delayMs = std::min(delayMs * 2, std::max<int64_t>(1, options.maxDelayMs));
  }
}

}  // namespace ot::controld
