// A connection to the API domain: TLS terminated here with the certificate controld pushed, then
// HTTP/2 when the client chose h2 by ALPN (api_connection_h2.cc over ApiHttp2Session: each stream
// is one request proxied as below, several at once), else HTTP/1.1. GET /api/tunnel/<id>/bridge
// with an upgrade becomes a BridgeSession on the same connection; every other request is proxied to
// controld's unix socket with the client's address, one at a time (pipelined requests wait their
// turn, and wait while more than 256 KiB of earlier answers are unread). While controld cannot be
// reached the answer is 503 with a JSON error. Past its handshake and until it becomes a bridge, a
// connection holds one of its source address's MAX_API_CONNECTIONS_PER_SOURCE slots; one that finds
// none is answered 429 and closed (h2: GOAWAY ENHANCE_YOUR_CALM). When relayd starts draining, an
// idle HTTP/1.1 connection is closed, a busy one closes after its answer (Connection: close), and
// an h2 one gets GOAWAY and closes once its open streams are answered.
//
// Owned by itself; freed in its socket's close callback. Loop thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/http_parser.h"
#include "common/tcp_stream.h"
#include "common/tls_stream.h"
#include "relayd/api_http2_session.h"
#include "relayd/bridge_session.h"
#include "relayd/relay_context.h"
#include "relayd/source_counts.h"

namespace ot::relayd {

class Relay;

class ApiConnection final : public TcpStream::Handler,
                            public BridgeTransport,
                            public tls::TlsStream::Owner,
                            public ApiHttp2Session::Handler {
 public:
  // Takes over `stream` (whose ClientHello, `hello`, was read but not yet given to TLS).
  // `startedAtMs` is when the connection was accepted: the handshake must end 10 s after it, and
  // 5 s after the hello at most.
  // Admission (api_admission.h) decides when its handshake may begin, or sheds it.
  // `dialId`: direct mode's dial the connection came from (0: accepted); it reaches the bridge
  // (BridgeTransport::directDialId) and the relay hears when the connection ends.
  static void start(RelayContext& context, Relay& relay, TcpStream* stream,
                    std::vector<uint8_t> hello, uint64_t startedAtMs, uint64_t dialId = 0);
  // Admitted: `context.apiHandshakes` has a slot for it (given back when the handshake ends) and
  // `handshakeSource` is its source's share (`sourceKey`, empty when not limited per source).
  static void begin(RelayContext& context, Relay& relay, TcpStream* stream,
                    std::vector<uint8_t> hello, uint64_t startedAtMs, SourceSlot handshakeSource,
                    std::string sourceKey, uint64_t dialId = 0);

  // TcpStream::Handler
  void onRead(std::span<const uint8_t> bytes) override;
  void onEof() override;
  void onStreamError(int status) override;
  void onWritten(size_t bytes) override;
  void onClosed() override;

  // BridgeTransport
  void sendPlain(std::span<const uint8_t> bytes) override;
  [[nodiscard]] size_t queuedBytes() const override;
  [[nodiscard]] uint64_t bytesWritten() const override;
  void pauseReading() override;
  void resumeReading() override;
  void closeTransport(bool reset) override;
  [[nodiscard]] const std::string& peerAddress() const override;
  [[nodiscard]] uint64_t directDialId() const override { return dialId_; }
  void setIdleReads(bool idle) override;
  void prefetchForWrite(unsigned stage) const override;
  void prefetchForRead(unsigned stage) const override;  // TcpStream::Handler

  // tls::TlsStream::Owner
  bool sendCiphertext(std::vector<uint8_t> bytes) override;
  void onTlsHandshakeDone() override;
  void onTlsPlaintext(std::span<uint8_t> bytes) override;
  void onTlsCloseNotify() override;
  void onTlsFailed() override;
  [[nodiscard]] bool wantsTlsPlaintext() const override;
  void onTlsDetachResult(tls::DetachResult result) override;
  void onTlsStepDelivered() override;
  // While a request that came with the client's Finished waits to be read (processHttp runs
  // once the TLS step returns), an upgrade for its decision (a record fetch), or a request for
  // controld's answer: the session ticket goes with the answer.
  [[nodiscard]] bool holdsTlsOutput() const override {
    return phase_ == Phase::kWaiting || (phase_ == Phase::kHttp && gotHttp_);
  }

  // ApiHttp2Session::Handler
  void onHttp2Request(Http2Request request) override;
  void onHttp2StreamClosed(int32_t streamId) override;
  void onHttp2Refused(int status) override;

  // relayd started draining (Relay::startDrain, through RelayContext::apiConnections).
  void onDrainStarted();

 private:
  // Stage 0 of prefetchForWrite and prefetchForRead.
  void prefetchOwnLines() const;
  enum class Phase : uint8_t { kHandshake, kHttp, kWaiting, kHttp2, kBridge, kClosing };
  static constexpr uint64_t kKeepAliveIdleMs = 60'000;

  ApiConnection(RelayContext& context, Relay& relay, TcpStream* stream);
  ~ApiConnection();

  void feedCiphertext(std::span<const uint8_t> bytes);
  // The handshake ended (done, failed, timed out or the connection went): its slots go back.
  void endHandshake();
  // Past the handshake: this source's share of API connections, or a 429 and the close (false).
  bool takeSourceConnectionSlot();
  // More of our answers than kHttpAnswersUnreadMark wait for the client: no next request.
  [[nodiscard]] bool answersUnread() const;
  // While answersUnread(): stop reading the client (once, counted) and say so (true).
  bool pausedForUnreadAnswers();
  void processHttp();
  void handleRequest(const HttpMessage& request);
  void handleBridgeUpgrade(const HttpMessage& request, const std::string& tunnelId);
  void proxy(const HttpMessage& request);
  void respond(std::vector<uint8_t> response, bool close);
  void respondError(int status, const std::string& tag, const std::string& message, bool close,
                    const std::vector<std::pair<std::string, std::string>>& extra = {});
  void requestDone(bool close);
  void fail();
  // HTTP/2 (api_connection_h2.cc)
  bool startHttp2();
  void processHttp2();
  void flushHttp2();
  void dispatchHttp2();
  void proxyHttp2(Http2Request request);
  [[nodiscard]] bool http2AnswersUnread() const;
  void armTimer(uint64_t delayMs);
  static void onTimer(TimerEntry* entry, void* owner);

  RelayContext& context_;
  Relay& relay_;
  TcpStream* stream_;
  tls::TlsStream tls_;
  std::unique_ptr<HttpParser> parser_;
  std::vector<uint8_t> httpInput_;  // plaintext not yet parsed (pipelining, waiting phases)
  std::unique_ptr<BridgeSession> bridge_;
  uint64_t proxyCall_ = 0;
  Phase phase_ = Phase::kHandshake;
  bool handshakeCounted_ = false;
  bool readPausedForAnswers_ = false;
  bool readPausedByBridge_ = false;
  bool gotHttp_ = false;         // plaintext for the HTTP phase arrived in the current receive
  bool partialRequest_ = false;  // HTTP/1.1: part of a request was parsed, the rest is awaited
  std::unique_ptr<ApiHttp2Session> h2_;
  // What only the handshake and the HTTP phases use, in a block of its own that the connection
  // frees when it becomes a bridge (~190 bytes less per idle bridge; docs/capacity.md). Made
  // again on use (http()), so nothing reaches a freed one.
  struct HttpSide {
    SourceSlot handshakeSource;   // this source's share of the handshake slots, while handshaking
    SourceSlot connectionSource;  // its share of API connections, from the handshake to a bridge
    std::string sourceKey;        // peerSourceKey of the peer; empty: not limited per source
    std::unordered_map<int32_t, uint64_t> h2Calls;  // stream -> its call to controld
    // Complete requests held while answers are unread, oldest first: a few at most.
    std::vector<Http2Request> h2Waiting;
  };
  HttpSide& http();
  std::unique_ptr<HttpSide> http_;
  bool h2Flushing_ = false;
  bool h2GoingAway_ = false;
  TimerEntry timer_;
  uint64_t dialId_ = 0;         // direct mode: the dial this connection came from (0: accepted)
  std::shared_ptr<bool> gone_;  // set when the connection is freed: async callbacks check it
};

}  // namespace ot::relayd
