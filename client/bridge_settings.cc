#include "client/bridge_settings.h"

#include <algorithm>
#include <utility>

#include "common/bridge_control.h"
#include "common/bridge_frame.h"
#include "common/tls_sessions.h"

namespace ot::client {

BridgeSettings makeBridgeSettings(BridgeConfig config) {
  BridgeSettings settings;
  config.window = std::clamp(config.window, bridge::kMinWindow, bridge::kMaxWindow);
  config.maxConns = std::clamp<uint32_t>(config.maxConns, 1, bridge::kMaxConnsPerBridge);
  config.links = std::max(config.links, 1);
  auto relay = makeRelayContext(config.caFile);
  if (relay.ok()) {
    settings.relayContext = relay.value();
  } else {
    settings.relayContextError = "tls client context: " + relay.error().message;
  }
  if (config.terminateTls) {
    auto visitor =
        makeVisitorContext(config.certificateChainPem, config.privateKeyPem, config.http2);
    if (visitor.ok()) {
      settings.visitorContext = visitor.value();
    } else {
      settings.visitorContextError = visitor.error().message;
    }
  }
  settings.config = std::move(config);
  return settings;
}

Result<tls::SslCtxPtr> makeRelayContext(const std::string& caFile) {
  // http/1.1 is what the relay selects; the bridge value lets a draining relay refuse the
  // connection from the ClientHello (docs/protocol.md section 1).
  auto relay = tls::makeClientContext(caFile, {"http/1.1", std::string(bridge::kBridgeAlpn)});
  if (!relay.ok()) return relay.error();
  tls::keepClientSessions(relay.value().get());  // reconnects resume
  return relay.value();
}

Result<tls::SslCtxPtr> makeVisitorContext(const std::string& certificateChainPem,
                                          const std::string& privateKeyPem, bool http2) {
  if (certificateChainPem.empty() || privateKeyPem.empty()) {
    return Error{ErrorKind::kInvalid, "no certificate for the tunnel yet"};
  }
  auto context = tls::makeServerContext(certificateChainPem, privateKeyPem,
                                        http2 ? kVisitorAlpnHttp2 : kVisitorAlpnHttp1);
  if (!context.ok()) {
    return Error{context.error().kind, "tunnel certificate: " + context.error().message};
  }
  return context.value();
}

std::vector<std::string> attachRoutes(const BridgeConfig& config) {
  std::vector<std::string> routes;
  routes.reserve(config.routes.size());
  for (const auto& [route, target] : config.routes) routes.push_back(route);
  if (routes.empty()) routes.emplace_back();
  return routes;
}

}  // namespace ot::client
