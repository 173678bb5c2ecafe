#include "common/metrics.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <prometheus/text_serializer.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {

// The value on the sample line that starts with `series` followed by a space.
std::optional<double> sampleValue(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return std::nullopt;
}

bool hasLine(const std::string& text, const std::string& expected) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line == expected) return true;
  }
  return false;
}

struct PromtoolResult {
  int exitCode = -1;
  std::string output;
};

// Runs `promtool check metrics` on `text`. promtool is a declared dependency: its absence fails.
PromtoolResult promtoolCheck(const std::string& text) {
  constexpr const char* kPromtool = "/usr/bin/promtool";
  REQUIRE_MESSAGE(std::filesystem::exists(kPromtool),
                  "promtool is missing: install the prometheus package (deploy/install-deps.sh)");
  std::string path = (std::filesystem::temp_directory_path() / "ot-metrics-XXXXXX").string();
  const int fd = mkstemp(path.data());
  REQUIRE(fd >= 0);
  close(fd);
  {
    std::ofstream file(path, std::ios::binary);
    file << text;
  }
  const std::string command = std::string(kPromtool) + " check metrics < " + path + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  PromtoolResult result;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  std::filesystem::remove(path);
  REQUIRE(WIFEXITED(status));
  result.exitCode = WEXITSTATUS(status);
  return result;
}

// What a daemon registers, in the shapes the reference uses.
void registerTypicalMetrics(ot::metrics::Metrics& metrics) {
  auto& ok = metrics.counter("opentunnel_bridge_attaches_total", "Bridge attach attempts.",
                             {{"result", "ok"}});
  auto& badToken = metrics.counter("opentunnel_bridge_attaches_total", "Bridge attach attempts.",
                                   {{"result", "bad_token"}});
  ok.Increment();
  ok.Increment(2);
  badToken.Increment();
  metrics.counter("opentunnel_acme_cooldowns_total", "CA cool-downs started.");
  metrics.gauge("opentunnel_bridges_attached", "Bridges attached here.").Set(2);
  metrics.gauge("opentunnel_mesh_peers", "Known peers by state.", {{"state", "up"}}).Set(4);
  auto& duration = metrics.histogram("opentunnel_visitor_connection_duration_seconds",
                                     "Duration of visitor connections carried over a bridge.",
                                     {0.1, 1, 10, 60}, {});
  duration.Observe(0.5);
  duration.Observe(5);
}

}  // namespace

TEST_CASE("metrics: process families render exactly") {
  const ot::metrics::ProcessStats stats{
      .openFds = 17, .maxFds = 1024, .residentMemoryBytes = 12345678, .uptimeSeconds = 42.5};
  const auto families = ot::metrics::processFamilies(stats, "opentunnel");
  CHECK(prometheus::TextSerializer().Serialize(families) ==
        "# HELP opentunnel_process_open_fds Open file descriptors.\n"
        "# TYPE opentunnel_process_open_fds gauge\n"
        "opentunnel_process_open_fds 17\n"
        "# HELP opentunnel_process_max_fds Soft limit on open file descriptors.\n"
        "# TYPE opentunnel_process_max_fds gauge\n"
        "opentunnel_process_max_fds 1024\n"
        "# HELP opentunnel_process_resident_memory_bytes Resident memory size in bytes.\n"
        "# TYPE opentunnel_process_resident_memory_bytes gauge\n"
        "opentunnel_process_resident_memory_bytes 12345678\n"
        "# HELP opentunnel_uptime_seconds Seconds since the process started.\n"
        "# TYPE opentunnel_uptime_seconds gauge\n"
        "opentunnel_uptime_seconds 42.5\n");

  // Unreadable values are left out, never reported as zero.
  const auto partial = ot::metrics::processFamilies({.uptimeSeconds = 1}, "x");
  REQUIRE(partial.size() == 1);
  CHECK(partial[0].name == "x_uptime_seconds");
}

TEST_CASE("metrics: process stats read from the kernel") {
  const auto before = ot::metrics::readProcessStats(std::chrono::steady_clock::now() - 5s);
  REQUIRE(before.openFds.has_value());
  REQUIRE(before.maxFds.has_value());
  REQUIRE(before.residentMemoryBytes.has_value());

  rlimit limit{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &limit) == 0);
  CHECK(*before.maxFds == static_cast<double>(limit.rlim_cur));
  // An independent count that opens nothing: probe every descriptor number below the limit.
  REQUIRE(limit.rlim_cur <= (rlim_t{1} << 22));
  double probed = 0;
  for (rlim_t fd = 0; fd < limit.rlim_cur; ++fd) {
    if (fcntl(static_cast<int>(fd), F_GETFD) != -1) probed += 1;
  }
  CHECK(*before.openFds == probed);
  CHECK(*before.residentMemoryBytes > 1024 * 1024);
  CHECK(std::fmod(*before.residentMemoryBytes, static_cast<double>(sysconf(_SC_PAGESIZE))) == 0);
  CHECK(before.uptimeSeconds >= 5);
  CHECK(before.uptimeSeconds < 60);

  // Three pipes are exactly six more descriptors.
  std::array<int, 6> fds{};
  for (size_t i = 0; i < fds.size(); i += 2) REQUIRE(pipe(&fds[i]) == 0);
  const auto during = ot::metrics::readProcessStats(std::chrono::steady_clock::now());
  for (const int fd : fds) close(fd);
  const auto after = ot::metrics::readProcessStats(std::chrono::steady_clock::now());
  CHECK(*during.openFds == *before.openFds + 6);
  CHECK(*after.openFds == *before.openFds);
}

TEST_CASE("metrics: out of descriptors, open fds reads as the limit") {
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &saved) == 0);
  // The lowest free descriptor number: with the soft limit there, every open fails with EMFILE.
  const int lowestFree = open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(lowestFree >= 0);
  close(lowestFree);
  rlimit lowered = saved;
  lowered.rlim_cur = static_cast<rlim_t>(lowestFree);
  REQUIRE(setrlimit(RLIMIT_NOFILE, &lowered) == 0);
  const auto stats = ot::metrics::readProcessStats(std::chrono::steady_clock::now());
  REQUIRE(setrlimit(RLIMIT_NOFILE, &saved) == 0);
  REQUIRE(stats.maxFds.has_value());
  CHECK(*stats.maxFds == static_cast<double>(lowestFree));
  REQUIRE(stats.openFds.has_value());
  CHECK(*stats.openFds == *stats.maxFds);
  CHECK_FALSE(stats.residentMemoryBytes.has_value());  // statm could not be opened either
}

TEST_CASE("metrics: registry families render with exact values") {
  ot::metrics::Metrics metrics;
  registerTypicalMetrics(metrics);
  const std::string text = metrics.render();
  CAPTURE(text);
  CHECK(hasLine(text, "# HELP opentunnel_bridge_attaches_total Bridge attach attempts."));
  CHECK(hasLine(text, "# TYPE opentunnel_bridge_attaches_total counter"));
  CHECK(hasLine(text, "opentunnel_bridge_attaches_total{result=\"ok\"} 3"));
  CHECK(hasLine(text, "opentunnel_bridge_attaches_total{result=\"bad_token\"} 1"));
  CHECK(hasLine(text, "opentunnel_acme_cooldowns_total 0"));
  CHECK(hasLine(text, "# TYPE opentunnel_bridges_attached gauge"));
  CHECK(hasLine(text, "opentunnel_bridges_attached 2"));
  CHECK(hasLine(text, "opentunnel_mesh_peers{state=\"up\"} 4"));
  CHECK(hasLine(text, "# TYPE opentunnel_visitor_connection_duration_seconds histogram"));
  CHECK(hasLine(text, "opentunnel_visitor_connection_duration_seconds_bucket{le=\"0.1\"} 0"));
  CHECK(hasLine(text, "opentunnel_visitor_connection_duration_seconds_bucket{le=\"1\"} 1"));
  CHECK(hasLine(text, "opentunnel_visitor_connection_duration_seconds_bucket{le=\"10\"} 2"));
  CHECK(hasLine(text, "opentunnel_visitor_connection_duration_seconds_bucket{le=\"+Inf\"} 2"));
  CHECK(hasLine(text, "opentunnel_visitor_connection_duration_seconds_count 2"));
  CHECK(hasLine(text, "opentunnel_visitor_connection_duration_seconds_sum 5.5"));
  CHECK(hasLine(text, "# TYPE opentunnel_process_open_fds gauge"));
  CHECK(hasLine(text, "# TYPE opentunnel_process_max_fds gauge"));
  CHECK(hasLine(text, "# TYPE opentunnel_process_resident_memory_bytes gauge"));
  CHECK(hasLine(text, "# TYPE opentunnel_uptime_seconds gauge"));
  rlimit limit{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &limit) == 0);
  CHECK(sampleValue(text, "opentunnel_process_max_fds") == static_cast<double>(limit.rlim_cur));
  CHECK(sampleValue(text, "opentunnel_process_open_fds") > 2);
  CHECK(sampleValue(text, "opentunnel_uptime_seconds") >= 0);
}

TEST_CASE("metrics: the same name and labels give the same child; conflicts throw") {
  ot::metrics::Metrics metrics("ot_test");
  auto& first = metrics.counter("ot_test_events_total", "Events.", {{"kind", "a"}});
  auto& again = metrics.counter("ot_test_events_total", "Events.", {{"kind", "a"}});
  auto& other = metrics.counter("ot_test_events_total", "Events.", {{"kind", "b"}});
  CHECK(&first == &again);
  CHECK(&first != &other);
  CHECK_THROWS_AS(metrics.gauge("ot_test_events_total", "Events."), std::invalid_argument);
  CHECK_THROWS_AS(metrics.counter("bad name_total", "Bad."), std::invalid_argument);
  CHECK_THROWS_AS(metrics.counter("ot_test_x_total", "X.", {{"bad-label", "v"}}),
                  std::invalid_argument);
  // The prefix names the process families.
  CHECK(sampleValue(metrics.render(), "ot_test_uptime_seconds").has_value());
  CHECK_FALSE(sampleValue(metrics.render(), "opentunnel_uptime_seconds").has_value());
}

TEST_CASE("metrics: counters updated from several threads while rendering") {
  ot::metrics::Metrics metrics;
  auto& counter = metrics.counter("opentunnel_test_events_total", "Events.");
  auto& histogram = metrics.histogram("opentunnel_test_wait_seconds", "Waits.", {1}, {});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10'000; ++i) {
        counter.Increment();
        histogram.Observe(0.5);
      }
    });
  }
  for (int i = 0; i < 20; ++i) CHECK_FALSE(metrics.render().empty());
  for (auto& thread : threads) thread.join();
  const std::string text = metrics.render();
  CHECK(hasLine(text, "opentunnel_test_events_total 40000"));
  CHECK(hasLine(text, "opentunnel_test_wait_seconds_count 40000"));
  CHECK(hasLine(text, "opentunnel_test_wait_seconds_bucket{le=\"1\"} 40000"));
}

TEST_CASE("metrics: promtool check metrics reports no problems") {
  ot::metrics::Metrics metrics;
  registerTypicalMetrics(metrics);
  const std::string text = metrics.render();
  const PromtoolResult result = promtoolCheck(text);
  CAPTURE(text);
  CHECK(result.output == "");
  CHECK(result.exitCode == 0);
}

TEST_CASE("metrics: promtool catches a lint problem (the check can fail)") {
  ot::metrics::Metrics metrics;
  metrics.counter("opentunnel_bridge_attaches", "A counter without the _total suffix.").Increment();
  const PromtoolResult result = promtoolCheck(metrics.render());
  CHECK(result.exitCode != 0);
  CHECK(result.output.find("_total") != std::string::npos);
}
