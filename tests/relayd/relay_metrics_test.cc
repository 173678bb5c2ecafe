#include "relayd/relay_metrics.h"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "common/metrics.h"

using ot::relayd::AttachOutcome;
using ot::relayd::DetachOutcome;
using ot::relayd::RelayMetrics;
using ot::relayd::VisitorOutcome;

namespace {

bool hasLine(const std::string& text, const std::string& expected) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line == expected) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("relay metrics: enum names are the fixed snake_case label values") {
  CHECK(ot::relayd::visitorOutcomeName(VisitorOutcome::kServedLocal) == "served_local");
  CHECK(ot::relayd::visitorOutcomeName(VisitorOutcome::kRejectedUnknownTunnel) ==
        "rejected_unknown_tunnel");
  CHECK(ot::relayd::visitorOutcomeName(VisitorOutcome::kRejectedUnknownRoute) ==
        "rejected_unknown_route");
  CHECK(ot::relayd::visitorOutcomeName(VisitorOutcome::kRejectedNoBridge) == "rejected_no_bridge");
  CHECK(ot::relayd::visitorOutcomeName(VisitorOutcome::kRejectedCertNotReady) ==
        "rejected_cert_not_ready");
  CHECK(ot::relayd::visitorOutcomeName(VisitorOutcome::kRejectedTooManyConnections) ==
        "rejected_too_many_connections");
  CHECK(ot::relayd::visitorOutcomeName(VisitorOutcome::kRejectedBadHello) == "rejected_bad_hello");
  CHECK(ot::relayd::visitorOutcomeName(VisitorOutcome::kRejectedTimeout) == "rejected_timeout");
  CHECK(ot::relayd::visitorOutcomeName(VisitorOutcome::kRejectedSourceLimit) ==
        "rejected_source_limit");
  CHECK(ot::relayd::visitorOutcomeName(VisitorOutcome::kError) == "error");

  CHECK(ot::relayd::attachOutcomeName(AttachOutcome::kOk) == "ok");
  CHECK(ot::relayd::attachOutcomeName(AttachOutcome::kBadToken) == "bad_token");
  CHECK(ot::relayd::attachOutcomeName(AttachOutcome::kCertNotReady) == "cert_not_ready");
  CHECK(ot::relayd::attachOutcomeName(AttachOutcome::kInvalidRoute) == "invalid_route");
  CHECK(ot::relayd::attachOutcomeName(AttachOutcome::kTooManyRoutes) == "too_many_routes");
  CHECK(ot::relayd::attachOutcomeName(AttachOutcome::kRouteConflict) == "route_conflict");
  CHECK(ot::relayd::attachOutcomeName(AttachOutcome::kError) == "error");

  CHECK(ot::relayd::detachOutcomeName(DetachOutcome::kClientClose) == "client_close");
  CHECK(ot::relayd::detachOutcomeName(DetachOutcome::kDrop) == "drop");
  CHECK(ot::relayd::detachOutcomeName(DetachOutcome::kIdleRetire) == "idle_retire");
  CHECK(ot::relayd::detachOutcomeName(DetachOutcome::kDrain) == "drain");
  CHECK(ot::relayd::detachOutcomeName(DetachOutcome::kDelete) == "delete");
  CHECK(ot::relayd::detachOutcomeName(DetachOutcome::kServerClose) == "server_close");
  CHECK(ot::relayd::detachOutcomeName(DetachOutcome::kReset) == "reset");
}

TEST_CASE("relay metrics: every series exists at zero and updates land on the right child") {
  ot::metrics::Metrics registry;
  RelayMetrics metrics(registry);
  const std::string fresh = registry.render();
  for (size_t i = 0; i < static_cast<size_t>(VisitorOutcome::kCount); ++i) {
    const std::string name(ot::relayd::visitorOutcomeName(static_cast<VisitorOutcome>(i)));
    CHECK_MESSAGE(
        hasLine(fresh, "opentunnel_visitor_connections_total{outcome=\"" + name + "\"} 0"), name);
  }
  for (size_t i = 0; i < static_cast<size_t>(AttachOutcome::kCount); ++i) {
    const std::string name(ot::relayd::attachOutcomeName(static_cast<AttachOutcome>(i)));
    CHECK_MESSAGE(hasLine(fresh, "opentunnel_bridge_attaches_total{result=\"" + name + "\"} 0"),
                  name);
  }
  for (size_t i = 0; i < static_cast<size_t>(DetachOutcome::kCount); ++i) {
    const std::string name(ot::relayd::detachOutcomeName(static_cast<DetachOutcome>(i)));
    CHECK_MESSAGE(hasLine(fresh, "opentunnel_bridge_detaches_total{reason=\"" + name + "\"} 0"),
                  name);
  }
  for (const char* line : {
           "opentunnel_bridges_attached 0",
           "opentunnel_bridge_backpressure_total{event=\"stall\"} 0",
           "opentunnel_bridge_backpressure_total{event=\"reset\"} 0",
           "opentunnel_visitor_connections_open 0",
           "opentunnel_visitor_bytes_total{direction=\"in\"} 0",
           "opentunnel_visitor_bytes_total{direction=\"out\"} 0",
           "opentunnel_visitor_connection_duration_seconds_count 0",
           "opentunnel_visitor_connection_duration_seconds_bucket{le=\"0.01\"} 0",
           "opentunnel_visitor_connection_duration_seconds_bucket{le=\"3600\"} 0",
           "opentunnel_visitor_connection_duration_seconds_bucket{le=\"+Inf\"} 0",
           "opentunnel_api_tls_handshakes_total{result=\"ok\"} 0",
           "opentunnel_api_tls_handshakes_total{result=\"failed\"} 0",
           "opentunnel_api_tls_handshakes_total{result=\"timeout\"} 0",
           "opentunnel_connections_shed_total{reason=\"handshakes\"} 0",
           "opentunnel_connections_shed_total{reason=\"connections\"} 0",
           "opentunnel_connections_shed_total{reason=\"source_handshakes\"} 0",
           "opentunnel_connections_shed_total{reason=\"source_api_connections\"} 0",
           "opentunnel_accept_errors_total{error=\"emfile\"} 0",
           "opentunnel_accept_errors_total{error=\"other\"} 0",
           "opentunnel_relay_buffered_bytes 0",
           "opentunnel_control_sessions_total 0",
           "opentunnel_control_connected 0",
           "opentunnel_api_proxy_failures_total 0",
       }) {
    CHECK_MESSAGE(hasLine(fresh, line), line);
  }

  metrics.visitor(VisitorOutcome::kRejectedNoBridge);
  metrics.visitor(VisitorOutcome::kRejectedNoBridge);
  metrics.attach(AttachOutcome::kRouteConflict);
  metrics.detach(DetachOutcome::kIdleRetire);
  metrics.visitorBytesOut.Increment(1234);
  metrics.visitorDuration.Observe(5);
  metrics.acceptEmfile.Increment();
  metrics.bridgesAttached.Set(3);
  const std::string after = registry.render();
  CHECK(hasLine(after, "opentunnel_visitor_connections_total{outcome=\"rejected_no_bridge\"} 2"));
  CHECK(hasLine(after, "opentunnel_visitor_connections_total{outcome=\"served_local\"} 0"));
  CHECK(hasLine(after, "opentunnel_bridge_attaches_total{result=\"route_conflict\"} 1"));
  CHECK(hasLine(after, "opentunnel_bridge_detaches_total{reason=\"idle_retire\"} 1"));
  CHECK(hasLine(after, "opentunnel_visitor_bytes_total{direction=\"out\"} 1234"));
  CHECK(hasLine(after, "opentunnel_visitor_bytes_total{direction=\"in\"} 0"));
  CHECK(hasLine(after, "opentunnel_visitor_connection_duration_seconds_bucket{le=\"1\"} 0"));
  CHECK(hasLine(after, "opentunnel_visitor_connection_duration_seconds_bucket{le=\"10\"} 1"));
  CHECK(hasLine(after, "opentunnel_accept_errors_total{error=\"emfile\"} 1"));
  CHECK(hasLine(after, "opentunnel_bridges_attached 3"));
}

TEST_CASE("relay metrics: the exposition passes promtool check metrics") {
  constexpr const char* kPromtool = "/usr/bin/promtool";
  // deploy/install-deps.sh installs it (package prometheus): missing is a failure, not a skip.
  REQUIRE_MESSAGE(std::filesystem::exists(kPromtool), "/usr/bin/promtool is not installed");
  ot::metrics::Metrics registry;
  RelayMetrics metrics(registry);
  metrics.visitor(VisitorOutcome::kServedLocal);
  metrics.visitorDuration.Observe(0.5);
  const std::string text = registry.render();

  std::string path = (std::filesystem::temp_directory_path() / "ot-relay-metrics-XXXXXX").string();
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
  std::string output;
  std::array<char, 4096> buffer{};
  while (const size_t n = fread(buffer.data(), 1, buffer.size(), pipe))
    output.append(buffer.data(), n);
  const int status = pclose(pipe);
  std::filesystem::remove(path);
  INFO("promtool said: " << output);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // promtool prints lint findings (e.g. naming problems) even when it exits 0; we want none.
  CHECK(output.empty());
}
