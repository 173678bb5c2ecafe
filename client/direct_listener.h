// Direct mode, the origin's side (docs/pools-direct.md): a listening profile. The relay opens
// the TCP connection to HOST:PORT; from the first byte on, each accepted connection is a bridge
// exactly as a dialed one (BridgeClient over the accepted socket): otunnel speaks first as the
// TLS client (SNI = the API domain, the relay's certificate verified as always), sends the
// upgrade and `attach` with its origin, credential, profile name and index. Nothing is sent
// before the peer has proved to be the relay (its certificate), so a stranger who connects gets
// a ClientHello and nothing else, and the credential never leaves for a wrong certificate.
//
// An accepted link that ends is not redialed: the relay redials. Every attempt has the usual
// handshake deadline (10 s from accept). At most kMaxAcceptedLinks connections are held at once;
// more are closed at accept and counted. When no link is attached for `quietMs` (from start, or
// from when the last one went), the status says so in words an owner can act on.
//
// Ownership: the Dialer owns it. A listener destroyed before stop() finished closes its handles
// on its own (like BridgePool). Loop thread only; never blocks after start() (which binds).
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "client/bridge_pool.h"

namespace ot::client {

inline constexpr size_t kMaxAcceptedLinks = 64;
inline constexpr uint64_t kNoRelayWaitMs = 30'000;

struct DirectListenerOptions {
  std::string host;  // where to listen: an IP literal (IPv6 without brackets) or a name
  uint16_t port = 0;
  size_t maxLinks = kMaxAcceptedLinks;  // connections held at once
  uint64_t quietMs = kNoRelayWaitMs;    // no link this long: lastError says why
};

class DirectListener {
 public:
  using OnStatus = std::function<void()>;

  // `config` is the pool configuration (tunnel, token or credential, origin, profile, index,
  // links wanted, routes, certificate); relayHost/relayPort are not used.
  DirectListener(uv_loop_t* loop, BridgeConfig config, DirectListenerOptions options,
                 OnStatus onStatus);
  ~DirectListener();
  DirectListener(const DirectListener&) = delete;
  DirectListener& operator=(const DirectListener&) = delete;

  // Binds and listens; a failure is fatal in status() (the owner asked for this port).
  void start();
  // Closes the socket and every bridge (1001); `done` runs on the loop once all are closed.
  void stop(std::function<void()> done);
  void updateCertificate(std::string certificateChainPem, std::string privateKeyPem);

  // links = wanted (links=), attached = bridges attached now, lastError as above.
  [[nodiscard]] PoolStatus status() const;
  // Connections closed at accept because kMaxAcceptedLinks were held.
  [[nodiscard]] uint64_t refused() const;
  // The port bound (the one picked for port 0); 0 before start() or when it failed.
  [[nodiscard]] uint16_t boundPort() const;
  size_t sendToAttached(const std::string& text, TextTiming timing = TextTiming::kNow);

 private:
  struct Impl;
  Impl* impl_;  // frees itself once closed when this goes first
};

// "no relay has connected to HOST:PORT in 30 s: ..." (never attached) or "no relay link on
// HOST:PORT for 30 s: ..." (all links gone), naming the API call that sets the direct address.
[[nodiscard]] std::string noRelayText(const std::string& host, uint16_t port, uint64_t quietMs,
                                      bool everAttached, const std::string& tunnelId,
                                      const std::string& origin);

}  // namespace ot::client
