#include "common/metrics.h"

#include <dirent.h>
#include <fcntl.h>
#include <prometheus/text_serializer.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>

namespace ot::metrics {
namespace {

struct FdCount {
  std::optional<double> count;
  bool exhausted = false;  // the directory could not be opened for lack of descriptors
};

// Open descriptors. Linux 6.2+ reports their number as the size of /proc/self/fd: one stat, O(1)
// and needing no descriptor. Older kernels report 0 there; then the directory's entries are
// counted (O(descriptors): at 19,000 bridges that walk was the largest part of a relayd scrape),
// not counting the descriptor used to read it.
FdCount countOpenFds() {
  struct stat status {};
  if (stat("/proc/self/fd", &status) == 0 && status.st_size > 0)
    return {static_cast<double>(status.st_size), false};
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return {std::nullopt, errno == EMFILE || errno == ENFILE};
  const std::string own = std::to_string(dirfd(dir));
  double count = 0;
  while (const dirent* entry = readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (name == "." || name == ".." || name == own) continue;
    count += 1;
  }
  closedir(dir);
  return {count, false};
}

std::optional<double> softFdLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return std::nullopt;
  return static_cast<double>(limit.rlim_cur);
}

// Plain syscalls rather than iostreams: this runs when descriptors may have run out, and then
// the simplest failure path is the one to trust.
std::optional<double> residentBytes() {
  const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::array<char, 256> buffer{};
  const ssize_t n = read(fd, buffer.data(), buffer.size());
  close(fd);
  if (n <= 0) return std::nullopt;
  // statm: size resident shared text lib data dt, in pages.
  const char* const end = buffer.data() + n;
  uint64_t sizePages = 0;
  auto parsed = std::from_chars(buffer.data(), end, sizePages);
  if (parsed.ec != std::errc() || parsed.ptr == end || *parsed.ptr != ' ') return std::nullopt;
  uint64_t residentPages = 0;
  parsed = std::from_chars(parsed.ptr + 1, end, residentPages);
  if (parsed.ec != std::errc()) return std::nullopt;
  const long pageSize = sysconf(_SC_PAGESIZE);
  if (pageSize <= 0) return std::nullopt;
  return static_cast<double>(residentPages) * static_cast<double>(pageSize);
}

prometheus::MetricFamily gaugeFamily(std::string_view prefix, std::string_view suffix,
                                     std::string help, double value) {
  prometheus::MetricFamily family;
  family.name = std::string(prefix) + "_" + std::string(suffix);
  family.help = std::move(help);
  family.type = prometheus::MetricType::Gauge;
  prometheus::ClientMetric metric;
  metric.gauge.value = value;
  family.metric.push_back(std::move(metric));
  return family;
}

}  // namespace

ProcessStats readProcessStats(std::chrono::steady_clock::time_point startedAt) {
  ProcessStats stats;
  stats.maxFds = softFdLimit();
  const FdCount fds = countOpenFds();
  // Out of descriptors reads as the limit, however it was found out (the directory could not be
  // opened, or the count reached the soft limit).
  const bool atLimit = fds.count && stats.maxFds && *fds.count >= *stats.maxFds;
  stats.openFds = fds.exhausted || atLimit ? stats.maxFds : fds.count;
  stats.residentMemoryBytes = residentBytes();
  const std::chrono::duration<double> uptime = std::chrono::steady_clock::now() - startedAt;
  stats.uptimeSeconds = uptime.count() < 0 ? 0 : uptime.count();
  return stats;
}

std::vector<prometheus::MetricFamily> processFamilies(const ProcessStats& stats,
                                                      std::string_view prefix) {
  std::vector<prometheus::MetricFamily> families;
  if (stats.openFds) {
    families.push_back(
        gaugeFamily(prefix, "process_open_fds", "Open file descriptors.", *stats.openFds));
  }
  if (stats.maxFds) {
    families.push_back(gaugeFamily(prefix, "process_max_fds",
                                   "Soft limit on open file descriptors.", *stats.maxFds));
  }
  if (stats.residentMemoryBytes) {
    families.push_back(gaugeFamily(prefix, "process_resident_memory_bytes",
                                   "Resident memory size in bytes.", *stats.residentMemoryBytes));
  }
  families.push_back(gaugeFamily(prefix, "uptime_seconds", "Seconds since the process started.",
                                 stats.uptimeSeconds));
  return families;
}

std::string renderMetrics(const prometheus::Registry& registry,
                          std::chrono::steady_clock::time_point startedAt,
                          std::string_view prefix) {
  std::vector<prometheus::MetricFamily> families = registry.Collect();
  for (auto& family : processFamilies(readProcessStats(startedAt), prefix)) {
    families.push_back(std::move(family));
  }
  return prometheus::TextSerializer().Serialize(families);
}

Metrics::Metrics(std::string prefix)
    : prefix_(std::move(prefix)),
      registry_(std::make_shared<prometheus::Registry>()),
      startedAt_(std::chrono::steady_clock::now()) {}

prometheus::Counter& Metrics::counter(const std::string& name, const std::string& help,
                                      const prometheus::Labels& labels) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(*registry_).Add(labels);
}

prometheus::Gauge& Metrics::gauge(const std::string& name, const std::string& help,
                                  const prometheus::Labels& labels) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(*registry_).Add(labels);
}

prometheus::Histogram& Metrics::histogram(const std::string& name, const std::string& help,
                                          const prometheus::Histogram::BucketBoundaries& buckets,
                                          const prometheus::Labels& labels) {
  return prometheus::BuildHistogram()
      .Name(name)
      .Help(help)
      .Register(*registry_)
      .Add(labels, buckets);
}

std::string Metrics::render() const {
  return renderMetrics(*registry_, startedAt_, prefix_);
}

}  // namespace ot::metrics
