// The descriptor warnings both daemons log: a warn when open descriptors cross 50 % or 80 % of the
// soft limit (RLIMIT_NOFILE), repeated every ten minutes while use stays at or above one of them,
// with fds, limit and tasks (what the daemon counts as its units of work: libuv handles in
// relayd, threads in controld). A leak then shows in the log well before accept() fails.
//
// DescriptorWarnings is the pure decision; checkDescriptors() reads /proc and logs what it
// decides. relayd calls that from a timer on its loop (it also counts the loop's handles there);
// controld runs a DescriptorWatch, one PeriodicTask thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include "common/log.h"
#include "common/periodic_task.h"

namespace ot::metrics {

// How often the daemons look, and how often a warning repeats while use stays high.
inline constexpr std::chrono::milliseconds kDescriptorCheckInterval{5'000};
inline constexpr std::chrono::milliseconds kDescriptorWarningRepeat{10 * 60 * 1000};

class DescriptorWarnings {
 public:
  explicit DescriptorWarnings(std::chrono::milliseconds repeat = kDescriptorWarningRepeat)
      : repeatMs_(repeat.count()) {}

  // The threshold to warn about now, in percent (80 or 50), or 0 for no line: use went above a
  // threshold it was not above at the last check, or stays above one and the last warning is
  // `repeat` old. `nowMs` is any steady clock.
  [[nodiscard]] int check(double openFds, double maxFds, int64_t nowMs);

 private:
  int64_t repeatMs_;
  int warnedLevel_ = 0;  // the threshold use was last seen above (0: below 50 %)
  int64_t warnedAtMs_ = 0;
};

// Reads the open descriptors and the soft limit now and logs the warning `warnings` asks for
// ("descriptor use is above <N>% of the limit", with fds, limit and tasks). Returns the level
// logged (0: none, or the counts could not be read).
int checkDescriptors(DescriptorWarnings& warnings, const log::Logger& logger, double tasks);

// The threads of this process (entries of /proc/self/task); 0 when it cannot be read.
[[nodiscard]] double threadCount();

// checkDescriptors() every kDescriptorCheckInterval on a thread of its own, with the process's
// threads as its tasks: controld's watch. stop() (or the destructor) ends it promptly.
class DescriptorWatch {
 public:
  explicit DescriptorWatch(log::Logger logger,
                           std::chrono::milliseconds interval = kDescriptorCheckInterval);
  void start() { task_.start(); }
  void stop() { task_.stop(); }

 private:
  log::Logger logger_;
  DescriptorWarnings warnings_;
  std::chrono::milliseconds interval_;
  PeriodicTask task_;  // last: stopped before the members its rounds use go
};

}  // namespace ot::metrics
