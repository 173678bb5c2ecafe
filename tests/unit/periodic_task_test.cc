// common/periodic_task.h: rounds on their own thread, the wait each round asks for, wake() cutting
// a wait short and stop() ending a long one at once.
#include "common/periodic_task.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace ot {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

constexpr milliseconds kHour = std::chrono::hours(1);
// Far longer than any of these tests should take, far shorter than the waits they cut short.
constexpr auto kPrompt = std::chrono::seconds(5);

// Counts rounds; a test waits for the count to reach a number.
class RoundCounter {
 public:
  void count() {
    {
      const std::lock_guard lock(mutex_);
      ++rounds_;
    }
    changed_.notify_all();
  }
  // True when `rounds` were counted within kPrompt.
  bool waitFor(int rounds) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, kPrompt, [&] { return rounds_ >= rounds; });
  }
  int rounds() {
    const std::lock_guard lock(mutex_);
    return rounds_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int rounds_ = 0;
};

// A round that counts itself and then waits an hour: only start, wake() and stop() move it on.
PeriodicTask::Round countThenWaitAnHour(RoundCounter& counter) {
  return [&counter] {
    counter.count();
    return kHour;
  };
}

}  // namespace

TEST_CASE("periodic task: the first round runs at start, then each waits what the last returned") {
  RoundCounter counter;
  std::mutex mutex;
  std::vector<milliseconds> waits;
  PeriodicTaskOptions options;
  options.beforeWait = [&](milliseconds wait) {
    const std::lock_guard lock(mutex);
    waits.push_back(wait);
  };
  int next = 0;
  PeriodicTask task(
      [&] {
        counter.count();
        // Short waits that grow, then an hour: the task must ask for each in turn.
        ++next;
        return next < 3 ? milliseconds(next) : kHour;
      },
      options);
  task.start();
  REQUIRE(counter.waitFor(3));
  task.stop();
  CHECK(counter.rounds() == 3);
  const std::lock_guard lock(mutex);
  CHECK(waits == std::vector<milliseconds>{milliseconds(1), milliseconds(2), kHour});
}

TEST_CASE("periodic task: stop() ends an hour's wait promptly") {
  RoundCounter counter;
  PeriodicTask task(countThenWaitAnHour(counter));
  task.start();
  REQUIRE(counter.waitFor(1));
  const auto before = SteadyClock::now();
  task.stop();
  CHECK(SteadyClock::now() - before < kPrompt);
  CHECK(counter.rounds() == 1);
  CHECK(task.stopping());
  task.stop();  // again: nothing to do
}

TEST_CASE("periodic task: wake() runs the next round now instead of after the wait") {
  RoundCounter counter;
  PeriodicTask task(countThenWaitAnHour(counter));
  task.start();
  REQUIRE(counter.waitFor(1));
  task.wake();
  CHECK(counter.waitFor(2));
  task.wake();
  CHECK(counter.waitFor(3));
  task.stop();
}

TEST_CASE("periodic task: the initial delay comes before the first round, and wake() ends it") {
  RoundCounter counter;
  std::atomic<int> waitsAsked{0};
  PeriodicTaskOptions options;
  options.initialDelay = kHour;
  options.beforeWait = [&](milliseconds wait) {
    if (waitsAsked++ == 0) CHECK(wait == kHour);
  };
  PeriodicTask task(countThenWaitAnHour(counter), options);
  task.start();
  // No round while the delay lasts: the round count stays 0 until wake().
  CHECK_FALSE(task.waitStopping(milliseconds(50)));
  CHECK(counter.rounds() == 0);
  task.wake();
  CHECK(counter.waitFor(1));
  task.stop();
  CHECK(counter.rounds() == 1);
}

TEST_CASE("periodic task: a final round after stop() when asked for, not before start()") {
  SUBCASE("started: one more round after the stop") {
    RoundCounter counter;
    PeriodicTaskOptions options;
    options.initialDelay = kHour;
    options.finalRoundOnStop = true;
    PeriodicTask task(countThenWaitAnHour(counter), options);
    task.start();
    task.stop();
    CHECK(counter.rounds() == 1);
  }
  SUBCASE("stopped first: start() does nothing, so no round at all") {
    RoundCounter counter;
    PeriodicTaskOptions options;
    options.finalRoundOnStop = true;
    PeriodicTask task(countThenWaitAnHour(counter), options);
    task.stop();
    task.start();
    task.stop();
    CHECK(counter.rounds() == 0);
  }
}

TEST_CASE("periodic task: stop() from inside a round does not wait for itself") {
  RoundCounter counter;
  PeriodicTask* self = nullptr;
  PeriodicTask task([&] {
    self->stop();
    counter.count();
    return kHour;
  });
  self = &task;
  task.start();
  REQUIRE(counter.waitFor(1));
  CHECK(task.stopping());
  // The destructor joins the thread, which leaves the loop because it is stopping.
}

TEST_CASE("periodic task: waitStopping() returns at once when stopped, else after its wait") {
  PeriodicTask task([] { return kHour; });
  CHECK_FALSE(task.waitStopping(milliseconds(1)));
  task.stop();
  const auto before = SteadyClock::now();
  CHECK(task.waitStopping(kHour));
  CHECK(SteadyClock::now() - before < kPrompt);
}

}  // namespace ot
