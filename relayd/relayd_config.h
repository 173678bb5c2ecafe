// relayd's settings: every flag also reads an environment variable (relayd --help lists them).
// Defaults and limits follow the bridge limits of docs/protocol.md and the reference service.
#pragma once

#include <cstdint>
#include <string>

#include "common/analytics/analytics_settings.h"
#include "common/cli_fwd.h"
#include "common/config.h"
#include "common/machine_identity.h"

namespace ot::relayd {

struct RelaydConfig {
  std::string domain = "opentunnel.localhost";
  config::ListenAddress tlsListen{config::ListenAddress::Kind::kTcp, "0.0.0.0", 8443, {}};
  config::ListenAddress httpListen{config::ListenAddress::Kind::kTcp, "0.0.0.0", 8080, {}};
  config::ListenAddress metricsListen{};  // off
  bool proxyProtocol = false;
  // Direct mode (docs/pools-direct.md): DIRECT_MODE off stops this relay dialing origins that
  // carry a direct address; DIRECT_ALLOW_PRIVATE lets it dial loopback, private, link-local,
  // multicast and unspecified addresses (tests, private networks).
  bool directMode = true;
  bool directAllowPrivate = false;
  std::string controlSocket = "/run/opentunnel/control.sock";  // controld's gRPC
  std::string apiSocket = "/run/opentunnel/api.sock";          // controld's HTTP API
  // MACHINE_ID (resolved by main: never empty afterwards), REGION and STATE_DIR.
  MachineIdentitySettings identity;
  // /health answers 503 once the control session has been down this long (relayd.md, Health).
  uint64_t controlDownGraceMs = 30'000;
  uint64_t connectionIdleTimeoutMs = 900'000;
  uint64_t halfCloseTimeoutMs = 60'000;
  uint64_t maxConnsPerBridge = 256;
  uint64_t maxConnsPerTunnel = 1024;
  uint64_t maxBridgesPerTunnel = 128;     // attached at once on this machine
  uint32_t authFailureLimit = 20;         // bad_token attaches per source per window; 0: off
  uint64_t authFailureWindowMs = 60'000;  // from a source's first failure
  // Of one tunnel's connections, what one source address (IPv6: its /64) may hold.
  uint64_t maxConnsPerTunnelPerSource = 128;
  // API connections one source address (IPv6: its /64) holds at once past their TLS handshake
  // and not bridges (HTTP requests, upgrades being decided).
  uint64_t maxApiConnectionsPerSource = 64;
  uint64_t bufferedBytesLimit = 256ull << 20;
  uint64_t shutdownDrainMs = 10'000;
  uint64_t bridgeHeartbeatMs = 15'000;    // announced in `attached`; silence before a ping
  uint64_t bridgeIdleTimeoutMs = 30'000;  // retired after this plus one heartbeat of silence
  // IO_URING: idle bridges read, and the heartbeat's pings go out, through io_uring
  // (relayd/io_ring.h); libuv alone when off or where the kernel refuses io_uring.
  bool ioUring = true;
  // TLS_HANDSHAKE_THREADS: threads that run the API domain's TLS handshake steps
  // (relayd/handshake_workers.h); 0: the loop runs them; -1 (auto): two less than the cores
  // this process may use, at most 8.
  int64_t tlsHandshakeThreads = -1;
  // The region mesh (docs/mesh.md). Off: a single machine, nothing listens.
  config::ListenAddress internalListen{};  // off
  std::string internalToken;               // INTERNAL_TOKEN: required with internalListen
  // INTERNAL_ADDRESS: "ip:port" where other machines reach this one's internal listener; forwards
  // leave from its IP. "" = INTERNAL_LISTEN's host and port (finishRelaydConfig fills it).
  std::string internalAddress;
  // controld's MESH_HANDOFF_SOCKET; "" = defaultHandoffSocketPath(controlSocket).
  std::string meshHandoffSocket;
  // ANALYTICS_*: visitor events posted in batches (docs/analytics.md); off without a URL.
  analytics::AnalyticsSettings analytics{};
  std::string logFormat = "text";
  std::string logLevel = "info";
};

void addRelaydFlags(CLI::App& app, RelaydConfig& config);

// What the flags cannot check one by one (settings that need each other); the error to print, or
// "" when the configuration can run. Also fills defaults derived from other settings.
[[nodiscard]] std::string finishRelaydConfig(RelaydConfig& config);

}  // namespace ot::relayd
