// otunnel's data plane: the bridges it keeps open to the relay and the visitor connections they
// carry (docs/protocol.md is the contract). Runs on one libuv loop; never blocks.
//
// Each of `links` bridges runs the reconnect loop of protocol.md section 10 on its own: TCP to the
// relay, TLS (verified against caFile, SNI = domain), the WebSocket upgrade to
// /api/tunnel/<id>/bridge, attach, then stream frames with per-connection flow-control credit,
// ping/pong liveness, drain handling. A visitor's `open` names a route; the route's LocalTarget
// says where it goes. In TLS-terminating mode the client runs a TLS server engine per visitor with
// the tunnel's certificate and key and forwards plaintext to the target; in passthrough mode the
// visitor's TLS bytes go to the target unchanged.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "client/text_timing.h"

namespace ot::client {

struct LocalTarget {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
};

// Terminating: a visitor's TLS handshake must be done this long after `open` (the spec's 10 s for
// a hello), or the stream is reset, so a visitor that sends a ClientHello and goes silent does
// not hold one of the tunnel's connections until the relay's 15-minute idle timeout. A period in
// which the bridge was congested does not count against the visitor (our ServerHello may have
// been waiting on the relay, which holds a bridge back over its budget: docs/relayd.md).
// Passthrough leaves the handshake, and its timeout, to the local service.
inline constexpr uint64_t kVisitorHandshakeTimeoutMs = 10'000;

struct BridgeConfig {
  std::string relayHost;  // TCP address of the relay (names under .localhost -> 127.0.0.1)
  uint16_t relayPort = 443;
  std::string domain;  // the API domain: SNI, certificate name and Host of the upgrade
  std::string caFile;  // "" -> system roots
  std::string tunnelId;
  std::string token;
  std::map<std::string, LocalTarget> routes;  // "" is the tunnel's own hostname
  bool terminateTls = true;                   // false: `otunnel tls` passthrough
  bool http2 = false;               // terminating: also offer h2 (the local service speaks h2c)
  std::string certificateChainPem;  // the tunnel's certificate (terminating mode)
  std::string privateKeyPem;
  int links = 2;
  uint32_t maxConns = 256;
  uint32_t window = 512 * 1024;
  uint64_t handshakeTimeoutMs = kVisitorHandshakeTimeoutMs;
  std::string origin;
  std::string profile;
  uint32_t profileIndex = 0;  // the profile's place in the origin's list (priority order)
  // An origin's derived credential (pools): attached instead of `token`, and it makes the pool
  // rules apply (a relay older than bridge protocol 2 is refused; docs/pools-dialer.md).
  std::string credential;
  // How long link i waits before its first dial (missing: 0), so a pool's dials are spread out.
  std::vector<uint64_t> startDelaysMs;
  // TCP (or accept), TLS, upgrade and attach must be done within this (protocol.md section 10).
  uint64_t attachDeadlineMs = 10'000;
  std::string userAgent = "otunnel/0.1.0";
};

// What the pool reports whenever a link changes state (on the loop thread).
struct PoolStatus {
  int links = 0;            // bridges wanted
  int attached = 0;         // bridges attached now
  int openConnections = 0;  // visitor connections in flight over all bridges
  bool fatal = false;       // a link stopped for good (bad token, 404, ...): the client should exit
  std::string lastError;    // the last failure, for people ("connection refused", "bad_token: ...")
  uint64_t nextRetryMs = 0;  // when not all attached: the soonest wait before a retry
};

class BridgePool {
 public:
  using OnStatus = std::function<void(const PoolStatus&)>;

  BridgePool(uv_loop_t* loop, BridgeConfig config, OnStatus onStatus);
  ~BridgePool();
  BridgePool(const BridgePool&) = delete;
  BridgePool& operator=(const BridgePool&) = delete;

  void start();
  // Closes every bridge with 1001 and every visitor connection; `done` runs on the loop when all
  // handles are closed.
  void stop(std::function<void()> done);
  // A renewed certificate: used for visitors that connect from now on.
  void updateCertificate(std::string certificateChainPem, std::string privateKeyPem);

  [[nodiscard]] PoolStatus status() const;
  // A control message on every attached link; how many took it.
  size_t sendToAttached(const std::string& text, TextTiming timing = TextTiming::kNow);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ot::client
