// Prometheus metrics for the daemons: a prometheus-cpp registry owned by a Metrics object, and
// the text exposition of it plus process metrics computed at scrape time. The daemon owns one
// Metrics for its lifetime and serves render() from its own listener.
//
// Threads: counter()/gauge()/histogram() lock the registry, so call them at startup and keep the
// returned references (valid as long as the Metrics object). Counter and Gauge updates are
// atomic and Histogram::Observe takes a short lock, so any thread may update them; render() may
// run concurrently with updates.
//
// Metrics are public to anyone who reaches the listener: labels take fixed values only (result,
// reason, ...), never tunnel IDs, hostnames, addresses or anything secret.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/labels.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ot::metrics {

inline constexpr std::string_view kPrefix = "opentunnel";

// What the process metrics report. A value that could not be read is std::nullopt and its
// family is left out of the scrape rather than reported as zero.
struct ProcessStats {
  std::optional<double> openFds{};
  std::optional<double> maxFds{};
  std::optional<double> residentMemoryBytes{};
  double uptimeSeconds = 0;
};

// Reads /proc/self/fd, the RLIMIT_NOFILE soft limit and /proc/self/statm now. When the fd
// directory cannot be opened because descriptors ran out, openFds is reported as maxFds: the
// moment that matters most for the open/max alert.
[[nodiscard]] ProcessStats readProcessStats(std::chrono::steady_clock::time_point startedAt);

// <prefix>_process_open_fds, _process_max_fds, _process_resident_memory_bytes and
// _uptime_seconds, all gauges. Pure.
[[nodiscard]] std::vector<prometheus::MetricFamily> processFamilies(const ProcessStats& stats,
                                                                    std::string_view prefix);

// Prometheus text format (version 0.0.4) of every family in `registry`, then the process
// families read now.
[[nodiscard]] std::string renderMetrics(const prometheus::Registry& registry,
                                        std::chrono::steady_clock::time_point startedAt,
                                        std::string_view prefix = kPrefix);

class Metrics {
 public:
  // Uptime counts from construction: build it first thing in main().
  explicit Metrics(std::string prefix = std::string(kPrefix));

  // Full names, so they can be found by grep: "opentunnel_bridge_attaches_total". Counter names
  // end in _total. Calling again with the same name adds (or returns) the child with these
  // labels; the help given first is kept. Throws std::invalid_argument on an invalid name or
  // label, or a name already used for another type: programming errors, found at startup.
  prometheus::Counter& counter(const std::string& name, const std::string& help,
                               const prometheus::Labels& labels = {});
  prometheus::Gauge& gauge(const std::string& name, const std::string& help,
                           const prometheus::Labels& labels = {});
  prometheus::Histogram& histogram(const std::string& name, const std::string& help,
                                   const prometheus::Histogram::BucketBoundaries& buckets,
                                   const prometheus::Labels& labels = {});

  [[nodiscard]] std::string render() const;
  [[nodiscard]] const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }
  [[nodiscard]] const std::string& prefix() const { return prefix_; }
  [[nodiscard]] std::chrono::steady_clock::time_point startedAt() const { return startedAt_; }

 private:
  std::string prefix_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::chrono::steady_clock::time_point startedAt_;
};

}  // namespace ot::metrics
