// What the load tool reads about the daemons it loads, from /proc and from relayd's /metrics:
// CPU time (utime + stime), run-queue delay, resident memory, open descriptors, a counter scraped
// from a Prometheus text page. Plain blocking reads: the tool calls them from its sampler thread
// only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

namespace ot::load {

struct ProcSample {
  uint64_t cpuMicros = 0;  // user + system, since the process started
  uint64_t rssKiB = 0;
  // Time spent runnable but waiting for a CPU (/proc/<pid>/schedstat; 0 without schedstats): on
  // a shared box, what tells a starved daemon from an idle one.
  uint64_t runDelayMicros = 0;
  // Of cpuMicros: relayd's TLS handshake workers (threads named ot-handshake-N).
  uint64_t handshakeWorkerCpuMicros = 0;
};

// nullopt when the process is gone (or /proc cannot be read).
[[nodiscard]] std::optional<ProcSample> sampleProcess(pid_t pid);

// The newest process whose /proc/<pid>/exe is `exePath` (resolved), or whose pid is the first
// number in `pidFile`; 0 when none.
[[nodiscard]] pid_t findByExe(const std::string& exePath);
[[nodiscard]] pid_t readPidFile(const std::string& pidFile);

// The sum of every sample of `metric` whose labels contain `labelFilter` (may be empty) on the
// page at http://<hostPort>/metrics; nullopt when the page could not be fetched.
[[nodiscard]] std::optional<double> scrapeCounter(const std::string& hostPort,
                                                  const std::string& metric,
                                                  const std::string& labelFilter);

}  // namespace ot::load
