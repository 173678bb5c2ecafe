#include "controld/store/database_wait.h"

#include <algorithm>

#include "common/log.h"

namespace ot::controld {
namespace {

const log::Logger kLog("controld");

}  // namespace

DatabaseWaitOutcome waitForDatabase(const DatabaseWaitOptions& options,
                                    const DatabaseWaitHooks& hooks) {
  const int64_t started = hooks.now_ms();
  int64_t delay_ms = std::max<int64_t>(1, options.first_delay_ms);
  for (int attempt = 1;; ++attempt) {
    const Status migrated = hooks.attempt();
    if (migrated.ok()) {
      kLog.info("connected to the database", {{"attempt", attempt}});
      return DatabaseWaitOutcome::kReady;
    }
    const Error& error = migrated.error();
    if (error.kind == ErrorKind::kInvalid) {
      kLog.error("the database cannot be used", {{"error", error.message}});
      return DatabaseWaitOutcome::kUnusable;
    }
    const int64_t waited = hooks.now_ms() - started;
    int64_t sleep_ms = delay_ms;
    if (options.timeout_ms != 0) {
      const int64_t left = options.timeout_ms - waited;
      if (left <= 0) {
        kLog.error("the database is not available, exiting with the last error",
                   {{"error", error.message}, {"waited_ms", waited}});
        return DatabaseWaitOutcome::kTimedOut;
      }
      sleep_ms = std::min(sleep_ms, left);
    }
    kLog.warn("waiting for the database",
              {{"attempt", attempt}, {"error", error.message}, {"retry_in_ms", sleep_ms}});
    if (hooks.sleep_or_stop(sleep_ms)) return DatabaseWaitOutcome::kStopped;
    delay_ms = std::min(delay_ms * 2, std::max<int64_t>(1, options.max_delay_ms));
  }
}

}  // namespace ot::controld
