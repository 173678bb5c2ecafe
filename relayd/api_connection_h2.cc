// ApiConnection's HTTP/2 phase (api_connection.h): the client chose h2 by ALPN. The framing is
// ApiHttp2Session's; here each complete request is proxied to controld as an HTTP/1.1 request, the
// way api_connection_http.cc does it, and its answer goes back on its stream. The bridge upgrade
// is HTTP/1.1 only (otunnel offers ALPN http/1.1 only, client/bridge_settings.cc): asked for here,
// it is answered 400.
//
// Budgets: the connection is not read while more than kHttpAnswersUnreadMark of its bytes wait in
// the socket's queue (nghttp2 keeps the rest of the answers, bounded by the streams, until the
// client reads); complete requests are not sent to controld while more than that mark of answers
// is unsent, but the socket is still read so the client's WINDOW_UPDATEs arrive.
#include <string_view>
#include <utility>

#include "common/http_serializer.h"
#include "common/log.h"
#include "relayd/api_connection.h"
#include "relayd/api_proxy.h"
#include "relayd/relay.h"
#include "relayd/sni_route.h"

namespace ot::relayd {

namespace {

const log::Logger kApiConnectionH2Log("relayd.api");

// As in api_connection.cc: what one connection may leave unread before it is not served more.
constexpr size_t kHttp2AnswersUnreadMark = 256u << 10;
constexpr size_t kHttp2OutputChunk = 64u << 10;
constexpr uint64_t kHttp2IdleMs = 60'000;

std::vector<uint8_t> toBytes(const std::string& text) {
  return {text.begin(), text.end()};
}

}  // namespace

bool ApiConnection::startHttp2() {
  Http2Limits limits;
  h2_ = ApiHttp2Session::create(*this, limits);
  if (!h2_) return false;
  phase_ = Phase::kHttp2;
  return true;
}

bool ApiConnection::http2AnswersUnread() const {
  return answersUnread() || h2_->pendingResponseBytes() > kHttp2AnswersUnreadMark;
}

void ApiConnection::processHttp2() {
  if (phase_ != Phase::kHttp2 || stream_ == nullptr) return;
  if (pausedForUnreadAnswers()) return;
  if (!httpInput_.empty()) {
    std::vector<uint8_t> input;
    input.swap(httpInput_);
    h2_->receive(input);
  }
  // A connection that finished its handshake after the drain began (Relay::startDrain told only
  // those before): what it sent first is served, then GOAWAY, as for the others.
  if (context_.draining && !h2GoingAway_) {
    h2GoingAway_ = true;
    h2_->goAway();
  }
  flushHttp2();
}

void ApiConnection::flushHttp2() {
  if (phase_ != Phase::kHttp2 || h2Flushing_) return;
  h2Flushing_ = true;
  dispatchHttp2();
  std::vector<uint8_t> out;
  while (phase_ == Phase::kHttp2 && stream_ != nullptr && !answersUnread() && h2_->wantsOutput()) {
    out.clear();
    if (h2_->takeOutput(out, kHttp2OutputChunk) == 0) break;
    sendPlain(out);
    dispatchHttp2();  // streams that closed may have made room
  }
  h2Flushing_ = false;
  if (phase_ != Phase::kHttp2 || stream_ == nullptr) return;
  if (h2_->finished()) {
    closeTransport(false);  // GOAWAY sent (ours or the client's) and no stream left
    return;
  }
  if (h2_->openStreams() == 0 && http().h2Waiting.empty() && !timer_.armed())
    armTimer(kHttp2IdleMs);
}

void ApiConnection::dispatchHttp2() {
  auto& waiting = http().h2Waiting;
  while (!waiting.empty() && !http2AnswersUnread()) {
    Http2Request request = std::move(waiting.front());
    waiting.erase(waiting.begin());
    proxyHttp2(std::move(request));
  }
}

void ApiConnection::onHttp2Request(Http2Request request) {
  timer_.cancel();
  const BridgePath bridgePath = parseBridgePath(request.path);
  if (bridgePath.matches) {
    h2_->respondError(request.streamId, 400, "BadRequestError",
                      "the bridge is opened over HTTP/1.1 (GET with Upgrade: websocket), not "
                      "HTTP/2");
    return;
  }
  http().h2Waiting.push_back(std::move(request));
}

void ApiConnection::onHttp2StreamClosed(int32_t streamId) {
  auto& calls = http().h2Calls;
  const auto found = calls.find(streamId);
  if (found == calls.end()) return;
  relay_.apiProxy().cancel(found->second);  // the client reset it: controld's answer is dropped
  calls.erase(found);
}

void ApiConnection::onHttp2Refused(int status) {
  kApiConnectionH2Log.debug("HTTP/2 request refused",
                            {{"status", status}, {"peer", peerAddress()}});
}

void ApiConnection::proxyHttp2(Http2Request request) {
  const int32_t streamId = request.streamId;
  if (!relay_.controlConnected()) {
    context_.metrics.apiProxyFailures.Increment();
    h2_->respondError(streamId, 503, "ServiceUnavailableError",
                      "the control plane is unavailable; retry", {{"retry-after", "5"}});
    return;
  }
  std::vector<HttpHeader> headers;
  bool hasHost = false;
  for (auto& header : request.headers) {
    if (isHopHeader(header.name)) continue;
    if (httpNameEquals(header.name, "host")) hasHost = true;
    headers.push_back(std::move(header));
  }
  if (!hasHost && !request.authority.empty()) headers.push_back({"host", request.authority});
  headers.push_back({"Connection", "close"});
  headers.push_back({"X-OpenTunnel-Client-Address", peerAddress()});
  auto serialized = serializeRequest(request.method, request.path, headers, request.body);
  if (!serialized) {
    h2_->respondError(streamId, 400, "BadRequestError", "the request cannot be forwarded");
    return;
  }
  std::weak_ptr<bool> gone = gone_;
  const uint64_t call = relay_.apiProxy().send(
      toBytes(*serialized), [this, gone, streamId](Result<ProxiedResponse> result) {
        auto alive = gone.lock();
        if (!alive || *alive || !h2_) return;
        http().h2Calls.erase(streamId);
        if (!result.ok()) {
          context_.metrics.apiProxyFailures.Increment();
          h2_->respondError(streamId, 503, "ServiceUnavailableError",
                            "the control plane is unavailable; retry", {{"retry-after", "5"}});
        } else {
          const HttpMessage& response = result->message;
          std::vector<HttpHeader> responseHeaders;
          for (const auto& header : response.headers) {
            if (!isHopHeader(header.name)) responseHeaders.push_back(header);
          }
          const int64_t length =
              response.contentLength ? static_cast<int64_t>(*response.contentLength) : -1;
          h2_->respond(streamId, response.status, responseHeaders, response.body,
                       result->headRequest, length);
        }
        // Draining: the answer goes, then GOAWAY (HTTP/1.1's Connection: close).
        if (context_.draining && !h2GoingAway_) {
          h2GoingAway_ = true;
          h2_->goAway();
        }
        flushHttp2();
      });
  http().h2Calls[streamId] = call;
}

void ApiConnection::onDrainStarted() {
  if (phase_ == Phase::kHttp && !partialRequest_ && httpInput_.empty()) {
    closeTransport(false);  // idle keep-alive: the client reconnects, elsewhere
    return;
  }
  if (phase_ == Phase::kHttp2 && !h2GoingAway_) {
    h2GoingAway_ = true;
    h2_->goAway();
    flushHttp2();
  }
}

}  // namespace ot::relayd
