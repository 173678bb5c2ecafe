// A small stand-in for relayd, for otunnel's tests: a TCP listener on 127.0.0.1:0 that speaks
// TLS with the test relay certificate, answers the WebSocket upgrade (101, or an error status),
// reads `attach` and answers it (attached or attach_error + close 1008), then records every
// stream frame the client sends and lets the test send frames, pings and closes. It keeps its
// own ledger of the client's send credit and flags any overrun. In direct mode it DIALS instead
// (dial(): it opens the TCP connection to otunnel's listening port and is then the same TLS
// server, upgrade and attach side). Header-only, loop thread only.
#pragma once

#include <doctest/doctest.h>
#include <uv.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/bridge_control.h"
#include "common/bridge_frame.h"
#include "common/http_parser.h"
#include "common/tls_engine.h"
#include "common/websocket_frame.h"
#include "common/websocket_handshake.h"
#include "common/websocket_message.h"
#include "tests/client/test_support.h"

namespace ot::client_test {

struct FakeRelayOptions {
  int upgradeStatus = 101;  // anything else: refuse the upgrade with it
  std::string errorTag = "NotFoundError";
  std::string attachError;          // non-empty: answer attach with this code, close 1008
  bool closeAfterAttached = false;  // close 1000 right after sending attached
  uint32_t window = 65536;          // limits.window: the client's send credit per connection
  uint32_t maxPayload = 32768;
  uint32_t maxConns = 256;
  uint32_t heartbeatMs = 15000;
  bool answerPings = true;
  uint32_t protocol = 1;  // the bridge protocol the relay says it speaks (1: says nothing)
  // A certificate for the right name from a CA the client does not trust (a wrong relay).
  bool untrustedCertificate = false;
  // Read and count the client's bytes, answer nothing (a peer that never finishes the handshake).
  bool silent = false;
};

// FakeRelayOptions with some fields changed (designated initializers trip
// -Wmissing-field-initializers in g++ 12).
inline FakeRelayOptions relayOptions(const std::function<void(FakeRelayOptions&)>& edit) {
  FakeRelayOptions options;
  edit(options);
  return options;
}

// What the client sent on one connection.
struct ConnRecord {
  std::string data;
  bool ended = false;
  bool reset = false;
  uint8_t resetReason = 0;
  std::string resetText;
  uint64_t creditFromClient = 0;           // increments the client granted us
  std::vector<uint32_t> grantsFromClient;  // each of them, in order
  uint64_t creditToClient = 0;             // limits.window plus what we granted it
  bool overrun = false;                    // the client sent beyond its credit
  uint64_t sentToClient = 0;               // data bytes we sent on this connection
  std::string toClient;                    // queued by queueData until the client's credit allows
};

class FakeRelay;

// One accepted connection.
class FakeBridge {
 public:
  FakeBridge(FakeRelay& relay, uv_loop_t* loop);

  // --- What the client did ---
  std::string method, path, host, userAgent;
  nlohmann::json attach;  // the attach message, once received
  bool attachedSent = false;
  std::map<uint32_t, ConnRecord> conns;
  std::vector<uint16_t> closeCodes;  // close frames from the client
  std::vector<std::string> pings;    // payloads of the client's pings
  std::vector<std::string> pongs;    // payloads of the client's pongs
  std::vector<std::string> texts;    // text messages after attach (status reports)
  uint64_t recordsFromClient = 0;    // TLS records received (counted from their headers)
  std::vector<std::string> badFrames;
  bool tcpClosed = false;
  uint64_t messages = 0;
  bool connected = false;  // dial(): the TCP connect completed
  int connectStatus = 0;   // dial(): its error, if any
  uint64_t bytesFromClient = 0;

  // --- What the test makes the relay do ---
  void sendText(std::string_view text) { send(ws::buildText(text)); }
  void sendFrame(const std::vector<uint8_t>& frame) {
    send(ws::buildFrame(ws::Opcode::kBinary, frame));
  }
  void sendOpen(uint32_t id, std::string_view route = "",
                std::string_view address = "203.0.113.7:51234");
  // Data frames, whatever the client's credit says.
  void sendData(uint32_t id, std::string_view bytes) {
    conns[id].sentToClient += bytes.size();
    const std::span<const uint8_t> all(reinterpret_cast<const uint8_t*>(bytes.data()),
                                       bytes.size());
    for (size_t at = 0; at < all.size(); at += bridge::kMaxDataPayload) {
      sendFrame(bridge::encodeData(
          id, all.subspan(at, std::min(bridge::kMaxDataPayload, all.size() - at))));
    }
  }
  // Data within the client's credit (its attach window plus its grants), the rest as it grants
  // more, like relayd.
  void queueData(uint32_t id, std::string_view bytes) {
    conns[id].toClient.append(bytes);
    flushToClient(id);
  }
  [[nodiscard]] uint64_t clientCredit(uint32_t id) {
    const ConnRecord& conn = conns[id];
    const uint64_t window = attach.value("window", uint64_t{524288});
    const uint64_t allowed = window + conn.creditFromClient;
    return allowed > conn.sentToClient ? allowed - conn.sentToClient : 0;
  }
  void flushToClient(uint32_t id) {
    ConnRecord& conn = conns[id];
    const size_t n =
        static_cast<size_t>(std::min<uint64_t>(clientCredit(id), conn.toClient.size()));
    if (n == 0) return;
    const std::string chunk = conn.toClient.substr(0, n);
    conn.toClient.erase(0, n);
    sendData(id, chunk);
  }
  void sendEnd(uint32_t id) { sendFrame(bridge::encodeEnd(id)); }
  void sendReset(uint32_t id, bridge::ResetReason reason = bridge::ResetReason::kVisitorIoError) {
    sendFrame(bridge::encodeReset(id, reason, "test"));
  }
  void sendCredit(uint32_t id, uint32_t increment) {
    conns[id].creditToClient += increment;
    sendFrame(bridge::encodeCredit(id, increment));
  }
  void sendPing(std::string_view payload) {
    send(ws::buildPing({reinterpret_cast<const uint8_t*>(payload.data()), payload.size()}));
  }
  void sendClose(uint16_t code) {
    closeSent_ = true;
    send(ws::buildClose(code));
  }
  void dropTcp() { closeTcp(); }

  // Internals, driven by FakeRelay.
  uv_tcp_t tcp{};
  void onAccepted();
  void dial(const std::string& ip, uint16_t port);
  void closeTcp();

 private:
  struct Write {
    uv_write_t req{};
    std::vector<uint8_t> data;
    FakeBridge* bridge = nullptr;
  };

  void onBytes(std::span<const uint8_t> bytes);
  // Walks the record headers (5 bytes: type, version, length) across reads.
  void countRecords(std::span<const uint8_t> bytes) {
    for (const uint8_t byte : bytes) {
      if (recordBodyLeft_ > 0) {
        --recordBodyLeft_;
        continue;
      }
      recordHeader_[recordHeaderHave_++] = byte;
      if (recordHeaderHave_ < 5) continue;
      recordHeaderHave_ = 0;
      recordBodyLeft_ = static_cast<size_t>(recordHeader_[3]) << 8 | recordHeader_[4];
      ++recordsFromClient;
    }
  }
  uint8_t recordHeader_[5] = {};
  size_t recordHeaderHave_ = 0;
  size_t recordBodyLeft_ = 0;
  void onPlaintext(std::span<uint8_t> bytes);
  void onUpgradeRequest();
  void onMessage(ws::ReadStep& step);
  void onAttach(std::string_view text);
  void onStreamFrame(std::span<const uint8_t> message);
  void send(const std::vector<uint8_t>& plaintext) { writePlain(plaintext); }
  void writePlain(std::span<const uint8_t> plaintext);
  void flushTls();

  FakeRelay& relay_;
  uv_loop_t* loop_;
  std::unique_ptr<tls::TlsEngine> tls_;
  HttpParser request_{HttpParser::Kind::kRequest};
  bool upgraded_ = false;
  bool closeSent_ = false;
  bool closeAfterFlush_ = false;
  size_t pendingWrites_ = 0;
  ws::MessageReader reader_{ws::Role::kServer, 1 << 20};
};

class FakeRelay {
 public:
  FakeRelay(TestLoop& loop, FakeRelayOptions relayOptions = {})
      : loop_(loop.get()), options(std::move(relayOptions)) {
    auto context =
        options.untrustedCertificate
            ? tls::makeServerContext(untrustedRelay().certPem, untrustedRelay().keyPem,
                                     {"http/1.1"})
            : tls::makeServerContext(pki().relayChain(), pki().relay.keyPem, {"http/1.1"});
    REQUIRE(context.ok());
    context_ = context.value();
    uv_tcp_init(loop_, &listener_);
    listener_.data = this;
    ++openHandles;
    sockaddr_in addr{};
    uv_ip4_addr("127.0.0.1", 0, &addr);
    REQUIRE(uv_tcp_bind(&listener_, reinterpret_cast<const sockaddr*>(&addr), 0) == 0);
    REQUIRE(uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), 64, &onConnection) == 0);
    sockaddr_storage bound{};
    int len = sizeof bound;
    uv_tcp_getsockname(&listener_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  ~FakeRelay() {
    close();
    while (openHandles > 0) uv_run(loop_, UV_RUN_ONCE);
  }
  FakeRelay(const FakeRelay&) = delete;
  FakeRelay& operator=(const FakeRelay&) = delete;

  void close() {
    if (!uv_is_closing(reinterpret_cast<uv_handle_t*>(&listener_))) {
      uv_close(reinterpret_cast<uv_handle_t*>(&listener_),
               [](uv_handle_t* handle) { --static_cast<FakeRelay*>(handle->data)->openHandles; });
    }
    for (auto& bridge : bridges) bridge->closeTcp();
  }

  [[nodiscard]] uint16_t port() const { return port_; }
  // Direct mode: the relay opens the connection to otunnel's listening `ip`:`port`; from then on
  // the bridge is the same as an accepted one.
  FakeBridge& dial(const std::string& ip, uint16_t port) {
    bridges.push_back(std::make_unique<FakeBridge>(*this, loop_));
    FakeBridge& b = *bridges.back();
    b.dial(ip, port);
    return b;
  }
  [[nodiscard]] FakeBridge& bridge(size_t i) { return *bridges.at(i); }
  [[nodiscard]] FakeBridge& latest() { return *bridges.back(); }
  [[nodiscard]] size_t attachedCount() const {
    size_t n = 0;
    for (const auto& bridge : bridges) n += bridge->attachedSent ? 1U : 0U;
    return n;
  }

  uv_loop_t* loop_;
  FakeRelayOptions options;
  tls::SslCtxPtr context_;
  std::vector<std::unique_ptr<FakeBridge>> bridges;
  int openHandles = 0;

 private:
  static void onConnection(uv_stream_t* listener, int status) {
    auto* self = static_cast<FakeRelay*>(listener->data);
    if (status != 0) return;
    auto bridge = std::make_unique<FakeBridge>(*self, self->loop_);
    FakeBridge& b = *bridge;
    self->bridges.push_back(std::move(bridge));
    if (uv_accept(listener, reinterpret_cast<uv_stream_t*>(&b.tcp)) != 0) {
      b.closeTcp();
      return;
    }
    b.onAccepted();
  }

  static const test::TestCert& untrustedRelay() {
    static const test::TestCert ca = test::makeCa("Not The Relay's CA");
    static const test::TestCert leaf = test::makeLeaf(ca, kRelayName, 9);
    return leaf;
  }

  uv_tcp_t listener_{};
  uint16_t port_ = 0;
};

// --- FakeBridge -------------------------------------------------------------------------------

inline FakeBridge::FakeBridge(FakeRelay& relay, uv_loop_t* loop) : relay_(relay), loop_(loop) {
  uv_tcp_init(loop_, &tcp);
  tcp.data = this;
  ++relay_.openHandles;
  tls_ = tls::TlsEngine::server(relay_.context_);
}

inline void FakeBridge::onAccepted() {
  // Room for a whole burst in one write, so tests can put frames on the wire at once.
  int size = 1 << 20;
  uv_send_buffer_size(reinterpret_cast<uv_handle_t*>(&tcp), &size);
  uv_read_start(
      reinterpret_cast<uv_stream_t*>(&tcp),
      [](uv_handle_t*, size_t suggested, uv_buf_t* buf) {
        buf->base = new char[suggested];
        buf->len = suggested;
      },
      [](uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
        auto* self = static_cast<FakeBridge*>(stream->data);
        std::unique_ptr<char[]> owned(buf->base);
        if (self->tcpClosed || nread == 0) return;
        if (nread < 0) {
          self->closeTcp();
          return;
        }
        self->onBytes({reinterpret_cast<const uint8_t*>(buf->base), static_cast<size_t>(nread)});
      });
}

inline void FakeBridge::dial(const std::string& ip, uint16_t port) {
  sockaddr_in addr{};
  REQUIRE(uv_ip4_addr(ip.c_str(), port, &addr) == 0);
  auto* req = new uv_connect_t;
  req->data = this;
  const int rc = uv_tcp_connect(req, &tcp, reinterpret_cast<const sockaddr*>(&addr),
                                [](uv_connect_t* r, int status) {
                                  auto* self = static_cast<FakeBridge*>(r->data);
                                  delete r;
                                  if (status != 0) {
                                    self->connectStatus = status;
                                    self->closeTcp();
                                    return;
                                  }
                                  if (self->tcpClosed) return;
                                  self->connected = true;
                                  self->onAccepted();
                                });
  if (rc != 0) {
    delete req;
    connectStatus = rc;
    closeTcp();
  }
}

inline void FakeBridge::closeTcp() {
  if (tcpClosed) return;
  tcpClosed = true;
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp), [](uv_handle_t* handle) {
    --static_cast<FakeBridge*>(handle->data)->relay_.openHandles;
  });
}

inline void FakeBridge::onBytes(std::span<const uint8_t> bytes) {
  bytesFromClient += bytes.size();
  countRecords(bytes);
  if (relay_.options.silent) return;
  tls_->feed(bytes);
  if (!tls_->handshakeDone()) {
    const tls::TlsStatus status = tls_->handshake();
    flushTls();
    if (status == tls::TlsStatus::kError) {
      closeTcp();
      return;
    }
    if (!tls_->handshakeDone()) return;
  }
  std::vector<uint8_t> plain(64 * 1024);
  for (;;) {
    const tls::ReadResult result = tls_->read(plain);
    if (result.bytes > 0) onPlaintext({plain.data(), result.bytes});
    if (tcpClosed) return;
    if (result.status == tls::TlsStatus::kClosed || result.status == tls::TlsStatus::kError) {
      closeTcp();
      return;
    }
    if (result.bytes < plain.size()) break;
  }
  flushTls();
}

inline void FakeBridge::onPlaintext(std::span<uint8_t> bytes) {
  if (!upgraded_) {
    const HttpParseResult result = request_.feed(std::span<const uint8_t>(bytes));
    if (result.status == HttpParseStatus::kNeedMore) return;
    if (result.status != HttpParseStatus::kUpgrade && result.status != HttpParseStatus::kDone) {
      closeTcp();
      return;
    }
    onUpgradeRequest();
    if (!upgraded_ || tcpClosed) return;
    bytes = bytes.subspan(result.consumed);
  }
  while (!bytes.empty() && !tcpClosed) {
    ws::ReadStep step = reader_.next(bytes);
    bytes = bytes.subspan(step.consumed);
    if (step.event == ws::ReadEvent::kError) {
      badFrames.push_back("websocket: " + std::string(ws::errorName(step.error)));
      closeTcp();
      return;
    }
    if (step.event == ws::ReadEvent::kMessage || step.event == ws::ReadEvent::kControl) {
      onMessage(step);
    }
  }
}

inline void FakeBridge::onUpgradeRequest() {
  const HttpMessage& message = request_.message();
  method = message.method;
  path = message.target;
  host = std::string(message.header("Host").value_or(""));
  userAgent = std::string(message.header("User-Agent").value_or(""));
  std::vector<ws::HttpHeader> headers;
  for (const HttpHeader& header : message.headers) headers.push_back({header.name, header.value});
  const ws::UpgradeCheck check = ws::checkUpgradeRequest(
      {message.method, message.versionMajor, message.versionMinor, headers});
  const int status = check.error != ws::UpgradeError::kNone ? ws::httpStatusFor(check.error)
                                                            : relay_.options.upgradeStatus;
  if (status != 101) {
    const std::string body =
        R"({"_tag":")" + relay_.options.errorTag + R"(","message":"refused by the fake relay"})";
    const std::string response = "HTTP/1.1 " + std::to_string(status) +
                                 " Refused\r\nContent-Type: application/json\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
                                 body;
    closeAfterFlush_ = true;
    writePlain({reinterpret_cast<const uint8_t*>(response.data()), response.size()});
    return;
  }
  const std::string response = ws::buildUpgradeResponse(check.key);
  upgraded_ = true;
  writePlain({reinterpret_cast<const uint8_t*>(response.data()), response.size()});
}

inline void FakeBridge::onMessage(ws::ReadStep& step) {
  ++messages;
  const std::string payload(step.payload.begin(), step.payload.end());
  switch (step.opcode) {
    case ws::Opcode::kPing:
      pings.push_back(payload);
      if (relay_.options.answerPings) send(ws::buildPong(step.payload));
      return;
    case ws::Opcode::kPong:
      pongs.push_back(payload);
      return;
    case ws::Opcode::kClose:
      closeCodes.push_back(step.closeCode);
      if (!closeSent_) {
        closeSent_ = true;
        send(ws::buildClose(step.closeCode == ws::kCloseNoStatus ? ws::kCloseNormal
                                                                 : step.closeCode));
      }
      closeAfterFlush_ = true;
      if (pendingWrites_ == 0) closeTcp();
      return;
    case ws::Opcode::kText:
      if (attachedSent) {
        texts.push_back(payload);
        return;
      }
      onAttach(payload);
      return;
    case ws::Opcode::kBinary:
      onStreamFrame(step.payload);
      return;
    case ws::Opcode::kContinuation:
      return;
  }
}

inline void FakeBridge::onAttach(std::string_view text) {
  if (!attach.is_null()) {
    badFrames.push_back("second text message");
    return;
  }
  attach = nlohmann::json::parse(text, nullptr, false);
  const FakeRelayOptions& options = relay_.options;
  if (!options.attachError.empty()) {
    sendText(R"({"type":"attach_error","code":")" + options.attachError +
             R"(","message":"refused by the fake relay"})");
    sendClose(ws::kClosePolicyViolation);
    return;
  }
  bridge::Attached attached;
  attached.bridgeId = "br_fake_" + std::to_string(relay_.bridges.size());
  attached.limits = {options.maxConns, options.maxPayload, options.window};
  attached.heartbeatMs = options.heartbeatMs;
  attached.protocol = options.protocol;
  sendText(bridge::serializeAttached(attached));
  attachedSent = true;
  if (options.closeAfterAttached) sendClose(ws::kCloseNormal);
}

inline void FakeBridge::sendOpen(uint32_t id, std::string_view route, std::string_view address) {
  conns[id].creditToClient = relay_.options.window;
  sendFrame(*bridge::encodeOpen(id, route, address));
}

inline void FakeBridge::onStreamFrame(std::span<const uint8_t> message) {
  const auto decoded = bridge::decodeFrame(message);
  if (!decoded.ok()) {
    badFrames.push_back(std::string(bridge::frameErrorName(decoded.error())));
    return;
  }
  const bridge::Frame& frame = decoded.value();
  if (frame.kind == bridge::FrameKind::kOpen || conns.count(frame.connId) == 0) {
    badFrames.push_back("frame for a connection we never opened");
    return;
  }
  ConnRecord& conn = conns[frame.connId];
  switch (frame.kind) {
    case bridge::FrameKind::kData:
      conn.data.append(reinterpret_cast<const char*>(frame.payload.data()), frame.payload.size());
      if (conn.data.size() > conn.creditToClient) conn.overrun = true;
      if (frame.payload.size() > relay_.options.maxPayload) badFrames.push_back("over max_payload");
      if (conn.ended || conn.reset) badFrames.push_back("data after end or reset");
      break;
    case bridge::FrameKind::kEnd:
      if (conn.ended) badFrames.push_back("second end");
      conn.ended = true;
      break;
    case bridge::FrameKind::kReset:
      conn.reset = true;
      conn.resetReason = static_cast<uint8_t>(frame.reason);
      conn.resetText = std::string(frame.text);
      break;
    case bridge::FrameKind::kCredit:
      conn.creditFromClient += frame.increment;
      conn.grantsFromClient.push_back(frame.increment);
      flushToClient(frame.connId);
      break;
    case bridge::FrameKind::kOpen:
      break;
  }
}

inline void FakeBridge::writePlain(std::span<const uint8_t> plaintext) {
  if (tcpClosed) return;
  if (tls_->write(plaintext) == tls::TlsStatus::kError) {
    closeTcp();
    return;
  }
  flushTls();
}

inline void FakeBridge::flushTls() {
  if (tcpClosed || tls_->pendingOutputSize() == 0) return;
  auto* w = new Write;
  w->data = tls_->takeOutput();
  w->bridge = this;
  w->req.data = w;
  const uv_buf_t buf =
      uv_buf_init(reinterpret_cast<char*>(w->data.data()), static_cast<unsigned>(w->data.size()));
  if (uv_write(&w->req, reinterpret_cast<uv_stream_t*>(&tcp), &buf, 1,
               [](uv_write_t* req, int status) {
                 auto* write = static_cast<Write*>(req->data);
                 FakeBridge* self = write->bridge;
                 delete write;
                 --self->pendingWrites_;
                 if (status == UV_ECANCELED) return;
                 if (self->closeAfterFlush_ && self->pendingWrites_ == 0) self->closeTcp();
               }) != 0) {
    delete w;
    closeTcp();
    return;
  }
  ++pendingWrites_;
}

}  // namespace ot::client_test
