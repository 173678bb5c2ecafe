// ApiConnection's HTTP phase (api_connection.h): requests parsed one at a time, the bridge
// upgrade checked with the relay, every other request proxied to controld and its answer
// re-framed for this connection. The TLS and closing side is in api_connection.cc.
#include <string_view>
#include <utility>

#include "common/http_serializer.h"
#include "common/websocket_handshake.h"
#include "relayd/api_connection.h"
#include "relayd/api_proxy.h"
#include "relayd/relay.h"
#include "relayd/sni_route.h"

namespace ot::relayd {

namespace {

std::vector<uint8_t> httpBytes(const std::string& text) {
  return {text.begin(), text.end()};
}

}  // namespace

void ApiConnection::processHttp() {
  if (phase_ == Phase::kHttp2) {
    processHttp2();
    return;
  }
  while (phase_ == Phase::kHttp && !httpInput_.empty()) {
    // Pipelined requests wait, and the client is not read, while it leaves our answers unread
    // (onWritten resumes).
    if (stream_ == nullptr) return;
    if (pausedForUnreadAnswers()) return;
    const HttpParseResult result = parser_->feed(std::span<const uint8_t>(httpInput_));
    switch (result.status) {
      case HttpParseStatus::kNeedMore:
        partialRequest_ = partialRequest_ || !httpInput_.empty();
        httpInput_.clear();
        return;
      case HttpParseStatus::kDone:
      case HttpParseStatus::kUpgrade: {
        httpInput_.erase(httpInput_.begin(),
                         httpInput_.begin() + static_cast<std::ptrdiff_t>(result.consumed));
        HttpMessage request = parser_->takeMessage();
        parser_->reset();
        partialRequest_ = false;
        handleRequest(
            request);  // an upgrade to any path but the bridge is proxied like any request
        break;
      }
      case HttpParseStatus::kError: {
        const HttpError error = parser_->error();
        httpInput_.clear();
        respondError(httpErrorStatus(error), "BadRequestError", std::string(parser_->errorDetail()),
                     true);
        return;
      }
      case HttpParseStatus::kHeaders:
      case HttpParseStatus::kBody:
        return;  // collect mode never returns these
    }
  }
}

void ApiConnection::handleRequest(const HttpMessage& request) {
  timer_.cancel();
  const BridgePath bridgePath = parseBridgePath(request.target);
  if (!bridgePath.matches) {
    proxy(request);
    return;
  }
  if (request.method != "GET") {
    respondError(405, "MethodNotAllowedError", "the bridge is opened with GET", false,
                 {{"Allow", "GET"}});
    return;
  }
  if (!bridgePath.validId) {
    respondError(404, "NotFoundError", "no such tunnel", false);
    return;
  }
  handleBridgeUpgrade(request, bridgePath.tunnelId);
}

void ApiConnection::handleBridgeUpgrade(const HttpMessage& request, const std::string& tunnelId) {
  std::vector<ws::HttpHeader> headers;
  headers.reserve(request.headers.size());
  for (const auto& header : request.headers) headers.push_back({header.name, header.value});
  ws::UpgradeRequest upgrade{request.method, request.versionMajor, request.versionMinor, headers};
  const ws::UpgradeCheck check = ws::checkUpgradeRequest(upgrade);
  if (check.error != ws::UpgradeError::kNone) {
    const int status = ws::httpStatusFor(check.error);
    if (status == 426) {
      respondError(426, "UpgradeRequiredError", std::string(ws::upgradeErrorMessage(check.error)),
                   false, {{"Sec-WebSocket-Version", "13"}});
    } else {
      respondError(status, "BadRequestError", std::string(ws::upgradeErrorMessage(check.error)),
                   false);
    }
    return;
  }
  const std::string key(check.key);
  phase_ = Phase::kWaiting;
  stream_->stopReading();
  std::weak_ptr<bool> gone = gone_;
  relay_.checkUpgrade(tunnelId, [this, gone, key, tunnelId](Relay::UpgradeDecision decision) {
    auto alive = gone.lock();
    if (!alive || *alive || phase_ != Phase::kWaiting) return;
    switch (decision) {
      case Relay::UpgradeDecision::kNotFound:
        phase_ = Phase::kHttp;
        respondError(404, "NotFoundError", "no such tunnel", false);
        return;
      case Relay::UpgradeDecision::kUnavailable:
        phase_ = Phase::kHttp;
        respondError(503, "ServiceUnavailableError", "the control plane is unavailable; retry",
                     false, {{"Retry-After", "5"}});
        return;
      case Relay::UpgradeDecision::kDraining:
        phase_ = Phase::kHttp;
        respondError(503, "ServiceUnavailableError", "the relay is restarting; retry", false,
                     {{"Retry-After", "1"}});
        return;
      case Relay::UpgradeDecision::kAllowed:
        break;
    }
    phase_ = Phase::kBridge;
    // Bridges have their own bounds (MAX_BRIDGES_PER_TUNNEL, failures): the per-source slots go
    // back (the handshake's went at its end) with the rest of the HTTP side.
    http_.reset();
    timer_.cancel();
    // A bridge lives long and mostly idles: drop OpenSSL's ~14 KiB once proven. The 101 below is
    // the write proof; the bridge's first record from otunnel the read proof.
    tls_.releaseHandshakeState();
    sendPlain(httpBytes(ws::buildUpgradeResponse(key)));
    bridge_ = std::make_unique<BridgeSession>(context_, relay_, *this, tunnelId);
    parser_.reset();
    // The buffer the upgrade request was read into goes too (its capacity stayed after the
    // request was taken): an idle bridge keeps neither.
    std::vector<uint8_t> early;
    early.swap(httpInput_);
    stream_->startReading();
    if (!early.empty()) bridge_->onPlaintext(early);
  });
}

void ApiConnection::proxy(const HttpMessage& request) {
  if (!relay_.controlConnected()) {
    // controld is restarting, frozen or gone: answer at once instead of waiting on its socket.
    const bool close = !request.keepAlive || context_.draining;
    context_.metrics.apiProxyFailures.Increment();
    respond(unavailableResponse("the control plane is unavailable; retry", close), close);
    return;
  }
  std::vector<HttpHeader> headers;
  for (const auto& header : request.headers) {
    if (!isHopHeader(header.name)) headers.push_back(header);
  }
  headers.push_back({"Connection", "close"});
  headers.push_back({"X-OpenTunnel-Client-Address", stream_->peerAddress()});
  auto serialized = serializeRequest(request.method, request.target, headers, request.body);
  if (!serialized) {
    respondError(400, "BadRequestError", "the request cannot be forwarded", true);
    return;
  }
  const bool clientWantsClose = !request.keepAlive;
  phase_ = Phase::kWaiting;
  stream_->stopReading();
  std::weak_ptr<bool> gone = gone_;
  proxyCall_ = relay_.apiProxy().send(
      httpBytes(*serialized), [this, gone, clientWantsClose](Result<ProxiedResponse> result) {
        auto alive = gone.lock();
        if (!alive || *alive) return;
        proxyCall_ = 0;
        phase_ = Phase::kHttp;
        const bool close = clientWantsClose || context_.draining;
        if (!result.ok()) {
          context_.metrics.apiProxyFailures.Increment();
          respond(unavailableResponse("the control plane is unavailable; retry", close), close);
          return;
        }
        // Re-frame controld's answer (parsed once, by the proxy) for this connection's keep-alive.
        const HttpMessage& response = result->message;
        std::vector<HttpHeader> responseHeaders;
        for (const auto& header : response.headers) {
          if (!isHopHeader(header.name)) responseHeaders.push_back(header);
        }
        if (close) responseHeaders.push_back({"Connection", "close"});
        auto out = result->headRequest
                       ? serializeResponseHead(response.status, response.reason, responseHeaders,
                                               response.contentLength
                                                   ? HttpFraming::length(*response.contentLength)
                                                   : HttpFraming::none())
                       : serializeResponse(response.status, response.reason, responseHeaders,
                                           response.body);
        if (!out) {
          respond(unavailableResponse("the control plane gave an unreadable answer", true), true);
          return;
        }
        respond(httpBytes(*out), close);
      });
}

void ApiConnection::respondError(int status, const std::string& tag, const std::string& message,
                                 bool close,
                                 const std::vector<std::pair<std::string, std::string>>& extra) {
  const bool closeNow = close || context_.draining;
  respond(jsonErrorResponse(status, tag, message, closeNow, extra), closeNow);
}

void ApiConnection::respond(std::vector<uint8_t> response, bool close) {
  sendPlain(response);
  requestDone(close);
}

void ApiConnection::requestDone(bool close) {
  if (close) {
    closeTransport(false);
    return;
  }
  phase_ = Phase::kHttp;
  armTimer(kKeepAliveIdleMs);
  if (stream_ != nullptr) stream_->startReading();
  processHttp();
}

}  // namespace ot::relayd
