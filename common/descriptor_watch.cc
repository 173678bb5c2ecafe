#include "common/descriptor_watch.h"

#include <dirent.h>

#include <string>
#include <utility>

#include "common/metrics.h"

namespace ot::metrics {

int DescriptorWarnings::check(double openFds, double maxFds, int64_t nowMs) {
  int level = 0;
  if (maxFds > 0 && openFds >= maxFds * 0.8) {
    level = 80;
  } else if (maxFds > 0 && openFds >= maxFds * 0.5) {
    level = 50;
  }
  if (level == 0 || level < warnedLevel_) {
    // Below a threshold again: crossing it later warns at once. Down from 80 % to 50 % only
    // lowers the mark; the 80 % line was just written.
    warnedLevel_ = level;
    return 0;
  }
  if (level > warnedLevel_ || nowMs - warnedAtMs_ >= repeatMs_) {
    warnedLevel_ = level;
    warnedAtMs_ = nowMs;
    return level;
  }
  return 0;
}

int checkDescriptors(DescriptorWarnings& warnings, const log::Logger& logger, double tasks) {
  const ProcessStats stats = readProcessStats(std::chrono::steady_clock::now());
  if (!stats.openFds || !stats.maxFds) return 0;
  const int64_t nowMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
  const int level = warnings.check(*stats.openFds, *stats.maxFds, nowMs);
  if (level == 0) return 0;
  const std::string message = "descriptor use is above " + std::to_string(level) + "% of the limit";
  logger.warn(message, {{"fds", static_cast<int64_t>(*stats.openFds)},
                        {"limit", static_cast<int64_t>(*stats.maxFds)},
                        {"tasks", static_cast<int64_t>(tasks)}});
  return level;
}

double threadCount() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  double count = 0;
  while (const dirent* entry = readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (name != "." && name != "..") count += 1;
  }
  closedir(dir);
  return count;
}

DescriptorWatch::DescriptorWatch(log::Logger logger, std::chrono::milliseconds interval)
    : logger_(std::move(logger)), interval_(interval), task_([this] {
        (void)checkDescriptors(warnings_, logger_, threadCount());
        return interval_;
      }) {}

}  // namespace ot::metrics
