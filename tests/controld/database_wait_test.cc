// Start-up's wait for the database (database_wait.h) on a manual clock: the backoff schedule,
// and that a database which never answers ends the wait at STARTUP_DB_TIMEOUT_MS, not after the
// next whole backoff step.
#include "controld/store/database_wait.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

namespace ot::controld {
namespace {

// A clock that moves only when the wait sleeps (and by `attempt_ms` per attempt).
struct ManualWait {
  int64_t now = 1'000'000;
  int64_t attemptMs = 0;
  int failuresLeft = 1'000'000;  // attempts that fail before one works
  ErrorKind failure = ErrorKind::kUnavailable;
  int64_t stopAt = -1;  // a signal arrives while sleeping past this time
  std::vector<int64_t> attemptsAt;
  std::vector<int64_t> sleeps;

  DatabaseWaitHooks hooks() {
    DatabaseWaitHooks hooks;
    hooks.attempt = [this]() -> Status {
      attemptsAt.push_back(now);
      now += attemptMs;
      if (failuresLeft-- > 0) return Error{failure, "connection refused"};
      return Ok{};
    };
    hooks.nowMs = [this] { return now; };
    hooks.sleepOrStop = [this](int64_t ms) {
      sleeps.push_back(ms);
      if (stopAt >= 0 && now + ms > stopAt) {
        now = stopAt;
        return true;
      }
      now += ms;
      return false;
    };
    return hooks;
  }
};

DatabaseWaitOptions withTimeout(int64_t timeoutMs) {
  DatabaseWaitOptions options;
  options.timeoutMs = timeoutMs;
  return options;
}

TEST_CASE("database wait: the backoff doubles from 200 ms up to 15 s") {
  ManualWait wait;
  wait.failuresLeft = 9;
  CHECK(waitForDatabase(withTimeout(0), wait.hooks()) == DatabaseWaitOutcome::kReady);
  CHECK(wait.sleeps == std::vector<int64_t>{200, 400, 800, 1600, 3200, 6400, 12800, 15000, 15000});
  CHECK(wait.attemptsAt.size() == 10);
}

TEST_CASE("database wait: the last sleep ends at the deadline, where one last attempt is made") {
  ManualWait wait;
  const int64_t started = wait.now;
  // 200 + 400 + 800 = 1400 ms, then 100 ms (not 1600) to the deadline.
  CHECK(waitForDatabase(withTimeout(1500), wait.hooks()) == DatabaseWaitOutcome::kTimedOut);
  CHECK(wait.sleeps == std::vector<int64_t>{200, 400, 800, 100});
  CHECK(wait.attemptsAt.back() == started + 1500);
  CHECK(wait.now == started + 1500);
}

TEST_CASE("database wait: slow attempts count against the timeout too") {
  ManualWait wait;
  wait.attemptMs = 700;
  const int64_t started = wait.now;
  CHECK(waitForDatabase(withTimeout(2000), wait.hooks()) == DatabaseWaitOutcome::kTimedOut);
  // attempt 0-700, sleep 200, attempt 900-1600, sleep 400 (to 2000), attempt 2000-2700, done.
  CHECK(wait.sleeps == std::vector<int64_t>{200, 400});
  CHECK(wait.now == started + 2700);
  for (const int64_t sleep : wait.sleeps) CHECK(sleep > 0);
}

TEST_CASE("database wait: every timeout ends at the deadline plus one attempt at most") {
  for (const int64_t timeout : {1, 199, 200, 201, 1000, 3000, 3001, 45'000, 120'000}) {
    CAPTURE(timeout);
    ManualWait wait;
    const int64_t started = wait.now;
    CHECK(waitForDatabase(withTimeout(timeout), wait.hooks()) == DatabaseWaitOutcome::kTimedOut);
    CHECK(wait.now == started + timeout);
  }
}

TEST_CASE("database wait: success, an unusable database and a stop end the wait at once") {
  {
    ManualWait wait;
    wait.failuresLeft = 2;
    CHECK(waitForDatabase(withTimeout(1500), wait.hooks()) == DatabaseWaitOutcome::kReady);
    CHECK(wait.sleeps == std::vector<int64_t>{200, 400});
  }
  {
    ManualWait wait;
    wait.failure = ErrorKind::kInvalid;
    CHECK(waitForDatabase(withTimeout(1500), wait.hooks()) == DatabaseWaitOutcome::kUnusable);
    CHECK(wait.sleeps.empty());
  }
  {
    ManualWait wait;
    wait.stopAt = wait.now + 300;
    CHECK(waitForDatabase(withTimeout(0), wait.hooks()) == DatabaseWaitOutcome::kStopped);
    CHECK(wait.sleeps == std::vector<int64_t>{200, 400});
  }
}

}  // namespace
}  // namespace ot::controld
