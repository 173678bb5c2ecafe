// What every bridge of a pool reads: the configuration (clamped to the protocol's ranges) and
// the TLS contexts built from it once, not per connection. Owned by BridgePool; links, sessions
// and streams hold a const reference and all end before it does. Loop thread only.
#pragma once

#include <string>
#include <vector>

#include "client/bridge_pool.h"
#include "common/result.h"
#include "common/tls_engine.h"

namespace ot::client {

// ALPN offered to visitors when terminating their TLS, in preference order. The plaintext goes
// to the local service as is, so it must speak whatever is negotiated here: HTTP/1.1 unless the
// user said the local service speaks HTTP/2 without TLS (`otunnel http --http2`).
inline const std::vector<std::string> kVisitorAlpnHttp1 = {"http/1.1"};
inline const std::vector<std::string> kVisitorAlpnHttp2 = {"h2", "http/1.1"};

struct BridgeSettings {
  BridgeConfig config;
  tls::SslCtxPtr relayContext;  // verifies the relay; null when it could not be built
  std::string relayContextError;
  tls::SslCtxPtr visitorContext;  // terminating mode; replaced by updateCertificate
  std::string visitorContextError;
};

// Clamps window (64 KiB-16 MiB), maxConns (1-256) and links (at least 1) and builds the contexts.
// A context that fails is left null with its error set: the pool reports it.
[[nodiscard]] BridgeSettings makeBridgeSettings(BridgeConfig config);

// The context of otunnel's connections to the relay (and the load tool's): verifies the relay
// with `caFile` (empty: the system's roots), offers http/1.1 then the bridge ALPN value, and keeps
// the relay's newest session ticket per relay host so a reconnect resumes (common/tls_sessions.h).
[[nodiscard]] Result<tls::SslCtxPtr> makeRelayContext(const std::string& caFile);

// A server context for visitors from a certificate chain and key (PEM); `http2` also offers h2.
[[nodiscard]] Result<tls::SslCtxPtr> makeVisitorContext(const std::string& certificateChainPem,
                                                        const std::string& privateKeyPem,
                                                        bool http2);

// The routes named in `attach`: the configured ones, or the bare hostname when none are.
[[nodiscard]] std::vector<std::string> attachRoutes(const BridgeConfig& config);

}  // namespace ot::client
