#include "relayd/relayd_config.h"

#include <CLI/CLI.hpp>

#include "common/fd_handoff.h"
#include "common/internal_settings.h"
#include "common/ip_address.h"
#include "relayd/mesh_route_table.h"

namespace ot::relayd {

void addRelaydFlags(CLI::App& app, RelaydConfig& c) {
  app.add_option("--domain", c.domain, "API domain; tunnels are <id>.<domain>")
      ->envname("OPENTUNNEL_DOMAIN")
      ->capture_default_str();
  config::addListenOption(app, "--tls-listen", "TLS_LISTEN", c.tlsListen,
                          "visitors and clients (TLS, routed by SNI)");
  config::addListenOption(app, "--http-listen", "HTTP_LISTEN", c.httpListen,
                          "/health, everything else redirected to https; off disables");
  config::addListenOption(app, "--metrics-listen", "METRICS_LISTEN", c.metricsListen,
                          "Prometheus /metrics; off disables");
  config::addBoolOption(app, "--proxy-protocol", "PROXY_PROTOCOL", c.proxyProtocol,
                        "require a PROXY v1/v2 header on the TLS listener");
  config::addBoolOption(app, "--direct-mode", "DIRECT_MODE", c.directMode,
                        "dial origins whose record carries a direct address (direct mode)");
  config::addBoolOption(app, "--io-uring", "IO_URING", c.ioUring,
                        "idle bridges read and are pinged through io_uring (off: libuv alone)");
  app.add_option("--tls-handshake-threads", c.tlsHandshakeThreads,
                 "threads for TLS handshakes (0: on the loop; -1: the usable cores less two, "
                 "at most 8)")
      ->envname("TLS_HANDSHAKE_THREADS")
      ->check(CLI::Range(int64_t{-1}, int64_t{64}))
      ->capture_default_str();
  config::addBoolOption(app, "--direct-allow-private", "DIRECT_ALLOW_PRIVATE", c.directAllowPrivate,
                        "let direct mode dial loopback, private, link-local and multicast "
                        "addresses");
  app.add_option("--control-socket", c.controlSocket, "controld's gRPC unix socket")
      ->envname("CONTROL_SOCKET")
      ->capture_default_str();
  app.add_option("--api-socket", c.apiSocket, "controld's HTTP API unix socket")
      ->envname("API_SOCKET")
      ->capture_default_str();
  addMachineIdentityOptions(app, c.identity,
                            "where relayd keeps its machine-id (give controld the same one to "
                            "share its ID)");
  mesh::addInternalOptions(app, c.internalListen, c.internalToken, c.internalAddress);
  analytics::addAnalyticsOptions(app, c.analytics);
  app.add_option("--mesh-handoff-socket", c.meshHandoffSocket,
                 "controld's unix socket for mesh connections (default: mesh-handoff.sock "
                 "beside CONTROL_SOCKET)")
      ->envname("MESH_HANDOFF_SOCKET");
  app.add_option("--control-down-grace-ms", c.controlDownGraceMs,
                 "/health answers 503 once the control session has been down this long")
      ->envname("CONTROL_DOWN_GRACE_MS")
      ->check(CLI::Range(uint64_t{0}, uint64_t{3600000}))
      ->capture_default_str();
  app.add_option("--connection-idle-timeout-ms", c.connectionIdleTimeoutMs,
                 "reset a tunnel connection with no traffic either way for this long")
      ->envname("CONNECTION_IDLE_TIMEOUT_MS")
      ->capture_default_str();
  app.add_option("--half-close-timeout-ms", c.halfCloseTimeoutMs,
                 "reset a half-closed tunnel connection after this long without traffic")
      ->envname("HALF_CLOSE_TIMEOUT_MS")
      ->capture_default_str();
  app.add_option("--max-conns-per-bridge", c.maxConnsPerBridge,
                 "public connections one bridge carries at once")
      ->envname("MAX_CONNS_PER_BRIDGE")
      ->check(CLI::Range(uint64_t{1}, uint64_t{65535}))
      ->capture_default_str();
  app.add_option("--max-conns-per-tunnel", c.maxConnsPerTunnel,
                 "public connections one tunnel carries at once on this machine")
      ->envname("MAX_CONNS_PER_TUNNEL")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--max-bridges-per-tunnel", c.maxBridgesPerTunnel,
                 "bridges one tunnel may have attached at once on this machine")
      ->envname("MAX_BRIDGES_PER_TUNNEL")
      ->check(CLI::Range(uint64_t{1}, uint64_t{4096}))
      ->capture_default_str();
  config::addAuthFailureOptions(app, c.authFailureLimit, c.authFailureWindowMs,
                                "bad_token attaches", "its attaches get too_many_failures");
  app.add_option("--max-conns-per-tunnel-per-source", c.maxConnsPerTunnelPerSource,
                 "public connections of one tunnel one source address (IPv6: /64) holds at once")
      ->envname("MAX_CONNS_PER_TUNNEL_PER_SOURCE")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--max-api-connections-per-source", c.maxApiConnectionsPerSource,
                 "API connections (past the TLS handshake, not bridges) one source address "
                 "(IPv6: /64) holds at once")
      ->envname("MAX_API_CONNECTIONS_PER_SOURCE")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--buffered-bytes-limit", c.bufferedBytesLimit,
                 "connection data held in memory at once, both directions")
      ->envname("BUFFERED_BYTES_LIMIT")
      ->check(CLI::Range(uint64_t{1} << 20, uint64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--shutdown-drain-ms", c.shutdownDrainMs,
                 "after SIGTERM, keep serving this long while bridges move elsewhere")
      ->envname("SHUTDOWN_DRAIN_MS")
      ->capture_default_str();
  app.add_option("--bridge-heartbeat-ms", c.bridgeHeartbeatMs,
                 "a bridge silent this long is pinged (sent to clients as heartbeat_ms)")
      ->envname("BRIDGE_HEARTBEAT_MS")
      ->check(CLI::Range(uint64_t{1000}, uint64_t{300000}))
      ->capture_default_str();
  app.add_option("--bridge-idle-timeout-ms", c.bridgeIdleTimeoutMs,
                 "a bridge silent this long plus one heartbeat is retired")
      ->envname("BRIDGE_IDLE_TIMEOUT_MS")
      ->check(CLI::Range(uint64_t{1000}, uint64_t{3600000}))
      ->capture_default_str();
  app.add_option("--log-format", c.logFormat, "text or json")
      ->envname("LOG_FORMAT")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--log-level", c.logLevel, "trace, debug, info, warn, error")
      ->envname("LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
}

std::string finishRelaydConfig(RelaydConfig& config) {
  if (config.meshHandoffSocket.empty()) {
    config.meshHandoffSocket = mesh::defaultHandoffSocketPath(config.controlSocket);
  }
  if (config.internalListen.kind == config::ListenAddress::Kind::kOff) return {};
  if (std::string error = mesh::checkInternalListen(config.internalListen, config.internalToken);
      !error.empty()) {
    return error;
  }
  if (config.internalAddress.empty()) config.internalAddress = config.internalListen.toString();
  // Forwards bind their source to this IP and peers connect to it: a literal address, no name.
  if (!parseIpAddress(hostOfAddress(config.internalAddress))) {
    return "INTERNAL_ADDRESS must be ip:port or [ipv6]:port, got \"" + config.internalAddress +
           "\"";
  }
  return {};
}

}  // namespace ot::relayd
