// relayd's settings: every flag also reads an environment variable (relayd --help lists them).
// Defaults and limits follow the bridge limits of docs/protocol.md and the reference service.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "common/config.h"

namespace ot::relayd {

struct RelaydConfig {
  std::string domain = "opentunnel.localhost";
  config::ListenAddress tls_listen{config::ListenAddress::Kind::kTcp, "0.0.0.0", 8443, {}};
  config::ListenAddress http_listen{config::ListenAddress::Kind::kTcp, "0.0.0.0", 8080, {}};
  config::ListenAddress metrics_listen{};  // off
  bool proxy_protocol = false;
  std::string control_socket = "/run/opentunnel/control.sock";  // controld's gRPC
  std::string api_socket = "/run/opentunnel/api.sock";          // controld's HTTP API
  std::string machine_id;                                       // random when empty
  uint64_t connection_idle_timeout_ms = 900'000;
  uint64_t half_close_timeout_ms = 60'000;
  uint64_t max_conns_per_bridge = 256;
  uint64_t max_conns_per_tunnel = 1024;
  uint64_t max_bridges_per_tunnel = 16;      // attached at once on this machine
  uint32_t auth_failure_limit = 20;          // bad_token attaches per source per window; 0: off
  uint64_t auth_failure_window_ms = 60'000;  // from a source's first failure
  // Of one tunnel's connections, what one source address (IPv6: its /64) may hold.
  uint64_t max_conns_per_tunnel_per_source = 128;
  // API connections one source address (IPv6: its /64) holds at once past their TLS handshake
  // and not bridges (HTTP requests, upgrades being decided).
  uint64_t max_api_connections_per_source = 64;
  uint64_t buffered_bytes_limit = 256ull << 20;
  uint64_t shutdown_drain_ms = 10'000;
  uint64_t bridge_heartbeat_ms = 15'000;     // announced in `attached`; silence before a ping
  uint64_t bridge_idle_timeout_ms = 30'000;  // retired after this plus one heartbeat of silence
  std::string log_format = "text";
  std::string log_level = "info";
};

void addRelaydFlags(CLI::App& app, RelaydConfig& config);

}  // namespace ot::relayd
