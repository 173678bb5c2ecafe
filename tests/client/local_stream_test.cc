// Visitor connections over a bridge against a fake relay and a local service: passthrough and
// TLS-terminating forwarding, end and reset (docs/protocol.md section 6) and flow control
// (section 7).
#include "client/local_stream.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "client/bridge_pool.h"
#include "client/bridge_settings.h"
#include "common/bridge_frame.h"
#include "common/tls_engine.h"
#include "tests/client/fake_relay.h"
#include "tests/client/test_support.h"

using namespace ot::client_test;
using ot::client::BridgeConfig;

namespace {

// A pool attached to the relay, with one local service behind route "".
struct Rig {
  explicit Rig(TestLoop& l, LocalServer& local, bool terminate, FakeRelayOptions options = {})
      : loop(l),
        relay(l, std::move(options)),
        pool(l, testConfig(relay.port(), local.port(), terminate)) {
    pool->start();
    REQUIRE(loop.runUntil([&] { return pool.last.attached == 1; }));
  }
  FakeBridge& bridge() { return relay.bridge(0); }

  TestLoop& loop;
  FakeRelay relay;
  PoolUnderTest pool;
};

std::string pattern(size_t size) {
  std::string out(size, '\0');
  for (size_t i = 0; i < size; ++i) out[i] = static_cast<char>('a' + (i * 7 + i / 251) % 26);
  return out;
}

// The visitor's side of TLS, pumped through the relay's frames by the test.
class Visitor {
 public:
  Visitor(FakeBridge& bridge, uint32_t id, std::vector<std::string> alpn = {"http/1.1"})
      : bridge_(bridge), id_(id) {
    auto context = ot::tls::makeClientContext(pki().caFile.string(), std::move(alpn));
    REQUIRE(context.ok());
    tls_ = ot::tls::TlsEngine::client(context.value(), kTunnelName, true);
    REQUIRE(tls_ != nullptr);
    (void)tls_->handshake();
    flush();
  }

  // Feeds what the client sent since the last call; true once `done` holds.
  void pump() {
    const std::string& data = bridge_.conns[id_].data;
    if (data.size() > consumed_) {
      tls_->feed(
          {reinterpret_cast<const uint8_t*>(data.data()) + consumed_, data.size() - consumed_});
      consumed_ = data.size();
      if (!tls_->handshakeDone()) (void)tls_->handshake();
      if (tls_->handshakeDone()) {
        std::vector<uint8_t> buf(16384);
        for (;;) {
          const auto result = tls_->read(buf);
          plaintext.append(reinterpret_cast<const char*>(buf.data()), result.bytes);
          if (result.status == ot::tls::TlsStatus::kClosed) closed = true;
          if (result.status == ot::tls::TlsStatus::kError) failed = true;
          if (result.bytes < buf.size()) break;
        }
      }
    }
    flush();
  }
  void write(const std::string& text) {
    REQUIRE(tls_->write({reinterpret_cast<const uint8_t*>(text.data()), text.size()}) ==
            ot::tls::TlsStatus::kOk);
    flush();
  }
  [[nodiscard]] bool ready() const { return tls_->handshakeDone(); }
  [[nodiscard]] std::string_view alpn() const { return tls_->alpn(); }

  std::string plaintext;
  bool closed = false;
  bool failed = false;

 private:
  void flush() {
    if (tls_->pendingOutputSize() == 0) return;
    const auto out = tls_->takeOutput();
    bridge_.queueData(id_, {reinterpret_cast<const char*>(out.data()), out.size()});
  }

  FakeBridge& bridge_;
  uint32_t id_;
  std::unique_ptr<ot::tls::TlsEngine> tls_;
  size_t consumed_ = 0;
};

}  // namespace

TEST_CASE("client stream: passthrough carries bytes both ways unchanged, end half-closes") {
  TestLoop loop;
  LocalServer echo(loop.get(), LocalServer::Mode::kEcho);
  Rig rig(loop, echo, false);
  FakeBridge& bridge = rig.bridge();

  bridge.sendOpen(1);
  const std::string hello = "\x16\x03\x01 not really a ClientHello \x00\xff";
  bridge.sendData(1, hello);
  REQUIRE(loop.runUntil([&] { return bridge.conns[1].data.size() == hello.size(); }));
  CHECK(bridge.conns[1].data == hello);
  CHECK(rig.pool.last.openConnections == 1);

  // 100 KB: more than one frame and more than one read, still byte for byte.
  const std::string big = pattern(100'000);
  bridge.sendCredit(1, 100'000);  // keep the client's send credit ahead of the echo
  bridge.queueData(1, big);       // more than the client's 64 KiB window: sent as it grants
  REQUIRE(loop.runUntil([&] { return bridge.conns[1].data.size() == hello.size() + big.size(); }));
  CHECK(bridge.conns[1].data == hello + big);
  // We received 100 KB+ on a 64 KiB window: the client granted credit in quarter batches.
  CHECK(bridge.conns[1].creditFromClient >= 16384);
  CHECK(bridge.conns[1].creditFromClient % 16384 == 0);

  // The visitor closes its side: the local service sees EOF, closes too, the client sends end.
  bridge.sendEnd(1);
  REQUIRE(loop.runUntil([&] { return bridge.conns[1].ended; }));
  REQUIRE(echo.conns().size() == 1);
  CHECK(echo.conns()[0]->eof);
  CHECK(echo.conns()[0]->received == hello + big);
  CHECK_FALSE(bridge.conns[1].reset);
  CHECK_FALSE(bridge.conns[1].overrun);
  REQUIRE(loop.runUntil([&] { return rig.pool.last.openConnections == 0; }));
  CHECK(bridge.badFrames.empty());
  CHECK(bridge.closeCodes.empty());
}

TEST_CASE("client stream: TLS is terminated with the tunnel certificate; plaintext goes local") {
  TestLoop loop;
  LocalServer echo(loop.get(), LocalServer::Mode::kEcho);
  Rig rig(loop, echo, true);
  FakeBridge& bridge = rig.bridge();

  bridge.sendOpen(1, "", "198.51.100.20:40000");
  Visitor visitor(bridge, 1);  // sends its ClientHello as data frames
  REQUIRE(loop.runUntil([&] {
    visitor.pump();
    return visitor.ready();
  }));
  CHECK(visitor.alpn() == "http/1.1");
  const std::string request = "GET / HTTP/1.1\r\nHost: t1.opentunnel.test\r\n\r\n";
  visitor.write(request);
  REQUIRE(loop.runUntil([&] {
    visitor.pump();
    return visitor.plaintext.size() >= request.size();
  }));
  CHECK(visitor.plaintext == request);
  REQUIRE(echo.conns().size() == 1);
  CHECK(echo.conns()[0]->received == request);  // the local service saw plaintext only

  // A larger exchange, several TLS records each way.
  const std::string body = pattern(70'000);
  visitor.write(body);
  REQUIRE(loop.runUntil([&] {
    visitor.pump();
    // The relay keeps granting what the client spends, like relayd would.
    const auto& conn = bridge.conns[1];
    if (conn.creditToClient - conn.data.size() < 32768) bridge.sendCredit(1, 65536);
    return visitor.plaintext.size() >= request.size() + body.size();
  }));
  CHECK(visitor.plaintext == request + body);
  CHECK_FALSE(visitor.failed);
  CHECK_FALSE(bridge.conns[1].overrun);
  CHECK_FALSE(bridge.conns[1].reset);
  CHECK(bridge.badFrames.empty());
}

TEST_CASE("client stream: a visitor that does not trust the certificate gets no plaintext") {
  TestLoop loop;
  LocalServer echo(loop.get(), LocalServer::Mode::kEcho);
  Rig rig(loop, echo, true);
  FakeBridge& bridge = rig.bridge();
  bridge.sendOpen(1);
  bridge.sendData(1, "this is not TLS at all, just bytes\r\n\r\n");
  REQUIRE(loop.runUntil([&] { return bridge.conns[1].reset; }));
  CHECK(bridge.conns[1].resetReason == 2);  // client_io_error
  CHECK(bridge.conns[1].resetText.find("tls") == 0);
  loop.runFor(50);
  for (const auto& conn : echo.conns()) CHECK(conn->received.empty());
}

TEST_CASE("client stream: the client never sends beyond its credit and resumes on credit") {
  TestLoop loop;
  const std::string payload = pattern(200'000);
  LocalServer source(loop.get(), LocalServer::Mode::kSource, payload);
  Rig rig(loop, source, false, relayOptions([](FakeRelayOptions& o) {
            o.window = 65536;
            o.maxPayload = 16384;
          }));
  FakeBridge& bridge = rig.bridge();

  bridge.sendOpen(1);
  REQUIRE(loop.runUntil([&] { return bridge.conns[1].data.size() == 65536; }));
  loop.runFor(200);  // the local service has more; the client must hold it back
  CHECK(bridge.conns[1].data.size() == 65536);
  CHECK_FALSE(bridge.conns[1].overrun);
  CHECK_FALSE(bridge.conns[1].ended);

  bridge.sendCredit(1, 100'000);
  REQUIRE(loop.runUntil([&] { return bridge.conns[1].data.size() == 165'536; }));
  loop.runFor(100);
  CHECK(bridge.conns[1].data.size() == 165'536);
  CHECK_FALSE(bridge.conns[1].ended);  // the end waits behind the data

  // The rest, and room to notice the end of file (a read needs credit to see it).
  bridge.sendCredit(1, 50'000);
  REQUIRE(loop.runUntil([&] { return bridge.conns[1].ended; }));
  CHECK(bridge.conns[1].data == payload);
  CHECK_FALSE(bridge.conns[1].overrun);
  CHECK(bridge.badFrames.empty());  // max_payload 16384 respected too
}

TEST_CASE("client stream: a slow local service holds the relay back; overrunning is 1002") {
  TestLoop loop;
  LocalServer sink(loop.get(), LocalServer::Mode::kSink);
  Rig rig(loop, sink, false);
  FakeBridge& bridge = rig.bridge();
  bridge.sendOpen(1);
  REQUIRE(loop.runUntil([&] { return sink.conns().size() == 1; }));
  sink.pauseReading();
  // Push as fast as the client grants. Once the kernel buffers toward the stalled service are
  // full, its writes stop completing and so do the grants: the relay is held at the window.
  const std::string chunk = pattern(256 * 1024);
  uint64_t lastCredit = 0;
  uint64_t lastChange = loop.now();
  REQUIRE(loop.runUntil(
      [&] {
        const uint64_t credit = bridge.clientCredit(1);
        if (credit > 0) bridge.sendData(1, std::string_view(chunk).substr(0, credit));
        if (bridge.conns[1].creditFromClient != lastCredit) {
          lastCredit = bridge.conns[1].creditFromClient;
          lastChange = loop.now();
        }
        return credit == 0 && loop.now() - lastChange >= 300;
      },
      20'000));
  CHECK(bridge.closeCodes.empty());
  // Grants come in batches of at least a quarter window (docs/protocol.md section 7). Not in
  // exact quarters: bytes the local socket takes at once count as taken at once, so a batch is
  // whatever was taken when it reached the quarter.
  REQUIRE_FALSE(bridge.conns[1].grantsFromClient.empty());
  for (const uint32_t grant : bridge.conns[1].grantsFromClient) CHECK(grant >= 16384);
  // One byte past the credit: a flow-control violation.
  bridge.sendData(1, "!");
  REQUIRE(loop.runUntil([&] { return !bridge.closeCodes.empty(); }));
  CHECK(bridge.closeCodes[0] == 1002);
  REQUIRE(loop.runUntil([&] { return rig.relay.attachedCount() == 2; }));
}

TEST_CASE("client stream: a reset from the relay aborts the local connection (RST)") {
  TestLoop loop;
  LocalServer echo(loop.get(), LocalServer::Mode::kEcho);
  Rig rig(loop, echo, false);
  FakeBridge& bridge = rig.bridge();
  bridge.sendOpen(1);
  bridge.sendData(1, "x");
  REQUIRE(loop.runUntil([&] { return bridge.conns[1].data == "x"; }));
  REQUIRE(echo.conns().size() == 1);
  bridge.sendReset(1);
  REQUIRE(loop.runUntil([&] { return echo.conns()[0]->closed; }));
  CHECK(echo.conns()[0]->error == UV_ECONNRESET);
  CHECK_FALSE(echo.conns()[0]->eof);
  REQUIRE(loop.runUntil([&] { return rig.pool.last.openConnections == 0; }));
  CHECK_FALSE(bridge.conns[1].reset);  // a reset is never answered with a reset
  CHECK(bridge.closeCodes.empty());
}

TEST_CASE("client stream: the local service resetting sends reset client_io_error") {
  TestLoop loop;
  LocalServer echo(loop.get(), LocalServer::Mode::kEcho);
  Rig rig(loop, echo, false);
  FakeBridge& bridge = rig.bridge();
  bridge.sendOpen(1);
  bridge.sendData(1, "y");
  REQUIRE(loop.runUntil([&] { return bridge.conns[1].data == "y"; }));
  REQUIRE(echo.conns().size() == 1);
  echo.resetConn(0);
  REQUIRE(loop.runUntil([&] { return bridge.conns[1].reset; }));
  CHECK(bridge.conns[1].resetReason == 2);
}

TEST_CASE("client stream: an unreachable local service or unknown route is connect_failed") {
  TestLoop loop;
  LocalServer echo(loop.get(), LocalServer::Mode::kEcho);
  FakeRelay relay(loop);
  BridgeConfig config = testConfig(relay.port(), echo.port(), false);
  config.routes["down"] = {"127.0.0.1", unusedPort(loop.get())};
  PoolUnderTest pool(loop, config);
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 1; }));
  FakeBridge& bridge = relay.bridge(0);

  bridge.sendOpen(1, "down");
  bridge.sendData(1, "queued before the connect fails");
  bridge.sendOpen(2, "nosuch");
  bridge.sendData(2, "ignored: the connection is closed");
  REQUIRE(loop.runUntil([&] { return bridge.conns[1].reset && bridge.conns[2].reset; }));
  CHECK(bridge.conns[1].resetReason == 5);
  CHECK(bridge.conns[1].resetText == "connection refused");
  CHECK(bridge.conns[2].resetReason == 5);
  CHECK(bridge.conns[2].resetText.find("nosuch") != std::string::npos);

  // The bridge is fine: the next connection works.
  bridge.sendOpen(3);
  bridge.sendData(3, "still here");
  REQUIRE(loop.runUntil([&] { return bridge.conns[3].data == "still here"; }));
  CHECK(bridge.closeCodes.empty());
}

TEST_CASE("client stream: a terminated visitor of an unreachable local service gets a 502") {
  TestLoop loop;
  LocalServer echo(loop.get(), LocalServer::Mode::kEcho);
  FakeRelay relay(loop);
  BridgeConfig config = testConfig(relay.port(), echo.port(), true);
  const uint16_t downPort = unusedPort(loop.get());
  config.routes["down"] = {"127.0.0.1", downPort};
  config.http2 = true;  // offers h2 as well, for the third visitor
  PoolUnderTest pool(loop, config);
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 1; }));
  FakeBridge& bridge = relay.bridge(0);

  // The connect fails before the visitor's TLS is done: the handshake still completes, and the
  // request is answered 502 with the failing address, then close_notify and end.
  bridge.sendOpen(1, "down");
  Visitor visitor(bridge, 1);
  REQUIRE(loop.runUntil([&] {
    visitor.pump();
    return visitor.ready();
  }));
  visitor.write("GET /page HTTP/1.1\r\nHost: down.t1.opentunnel.test\r\n\r\n");
  REQUIRE(loop.runUntil([&] {
    visitor.pump();
    return visitor.closed && bridge.conns[1].ended;
  }));
  CHECK(visitor.plaintext.rfind("HTTP/1.1 502 Bad Gateway\r\n", 0) == 0);
  CHECK(visitor.plaintext.find("127.0.0.1:" + std::to_string(downPort) + " (connection refused)") !=
        std::string::npos);
  CHECK(visitor.plaintext.find("Connection: close\r\n") != std::string::npos);
  CHECK_FALSE(bridge.conns[1].reset);
  // The visitor's end finishes the connection.
  bridge.sendEnd(1);
  REQUIRE(loop.runUntil([&] { return pool.last.openConnections == 0; }));

  // A visitor that ends without asking anything is reset (connect_failed).
  bridge.sendOpen(2, "down");
  Visitor silent(bridge, 2);
  REQUIRE(loop.runUntil([&] {
    silent.pump();
    return silent.ready();
  }));
  bridge.sendEnd(2);
  REQUIRE(loop.runUntil([&] { return bridge.conns[2].reset; }));
  CHECK(bridge.conns[2].resetReason == 5);
  CHECK(silent.plaintext.empty());

  // An HTTP/2 visitor cannot read an HTTP/1.1 answer: it is reset.
  bridge.sendOpen(3, "down");
  Visitor h2(bridge, 3, {"h2"});
  REQUIRE(loop.runUntil([&] {
    h2.pump();
    return h2.ready();
  }));
  CHECK(h2.alpn() == "h2");
  h2.write("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
  REQUIRE(loop.runUntil([&] {
    h2.pump();
    return bridge.conns[3].reset;
  }));
  CHECK(bridge.conns[3].resetReason == 5);
  CHECK(bridge.conns[3].resetText == "connection refused");
  CHECK(h2.plaintext.empty());

  // The bridge and the reachable route are unaffected.
  CHECK(bridge.closeCodes.empty());
  CHECK(bridge.badFrames.empty());
}

TEST_CASE("client stream: closing the bridge aborts its connections") {
  TestLoop loop;
  LocalServer echo(loop.get(), LocalServer::Mode::kEcho);
  Rig rig(loop, echo, false);
  FakeBridge& bridge = rig.bridge();
  bridge.sendOpen(1);
  bridge.sendData(1, "z");
  REQUIRE(loop.runUntil([&] { return bridge.conns[1].data == "z"; }));
  bridge.dropTcp();
  REQUIRE(loop.runUntil([&] { return echo.conns()[0]->closed; }));
  CHECK(echo.conns()[0]->error == UV_ECONNRESET);
  REQUIRE(loop.runUntil([&] { return rig.relay.attachedCount() == 2; }));
  CHECK(rig.pool.last.openConnections == 0);
}

TEST_CASE("client stream: open ids must increase; an old id is a protocol error") {
  TestLoop loop;
  LocalServer echo(loop.get(), LocalServer::Mode::kEcho);
  Rig rig(loop, echo, false);
  FakeBridge& bridge = rig.bridge();
  bridge.sendOpen(5);
  bridge.sendOpen(3);
  REQUIRE(loop.runUntil([&] { return !bridge.closeCodes.empty(); }));
  CHECK(bridge.closeCodes[0] == 1002);
}

TEST_CASE("client stream: a terminated visitor that ends during its handshake is reset at once") {
  TestLoop loop;
  LocalServer echo(loop.get(), LocalServer::Mode::kEcho);
  Rig rig(loop, echo, true);
  FakeBridge& bridge = rig.bridge();

  // The ClientHello goes out and the ServerHello comes back; then the visitor ends instead of
  // finishing: it never will, so its connection (a slot of the tunnel's) is freed now.
  bridge.sendOpen(1);
  Visitor visitor(bridge, 1);
  REQUIRE(loop.runUntil([&] { return !bridge.conns[1].data.empty(); }));
  CHECK_FALSE(visitor.ready());
  bridge.sendEnd(1);
  REQUIRE(loop.runUntil([&] { return bridge.conns[1].reset; }));
  CHECK(bridge.conns[1].resetReason == 2);  // client_io_error
  CHECK(bridge.conns[1].resetText.find("handshake") != std::string::npos);
  REQUIRE(loop.runUntil([&] { return rig.pool.last.openConnections == 0; }));
  CHECK(bridge.badFrames.empty());
  CHECK(bridge.closeCodes.empty());
}

TEST_CASE("client stream: a terminated visitor's handshake has a deadline; a finished one none") {
  TestLoop loop;
  LocalServer echo(loop.get(), LocalServer::Mode::kEcho);
  FakeRelay relay(loop);
  BridgeConfig config = testConfig(relay.port(), echo.port(), true);
  config.handshakeTimeoutMs = 300;
  PoolUnderTest pool(loop, config);
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 1; }));
  FakeBridge& bridge = relay.bridge(0);

  // A ClientHello, then silence: reset once the handshake deadline passes.
  bridge.sendOpen(1);
  Visitor silent(bridge, 1);
  REQUIRE(loop.runUntil([&] { return bridge.conns[1].reset; }));
  CHECK(bridge.conns[1].resetReason == 2);  // client_io_error
  CHECK(bridge.conns[1].resetText.find("did not finish") != std::string::npos);
  CHECK_FALSE(silent.ready());

  // A visitor that finishes its handshake keeps its connection past that deadline.
  bridge.sendOpen(2);
  Visitor visitor(bridge, 2);
  REQUIRE(loop.runUntil([&] {
    visitor.pump();
    return visitor.ready();
  }));
  loop.runFor(600);
  CHECK_FALSE(bridge.conns[2].reset);
  visitor.write("still here");
  REQUIRE(loop.runUntil([&] {
    visitor.pump();
    return visitor.plaintext == "still here";
  }));
  CHECK(bridge.badFrames.empty());
  CHECK(bridge.closeCodes.empty());
}

namespace {

// A stream's host with the bridge's congestion in the test's hands: records the frame types the
// stream sends toward the relay.
class CongestionHost final : public ot::client::StreamHost {
 public:
  void sendStreamFrame(std::span<const uint8_t> head, std::span<const uint8_t>) override {
    if (!head.empty()) frameTypes.push_back(head[0]);
  }
  void onStreamDeadlineChanged() override { ++deadlineChanges; }
  void onStreamFreed(uint32_t) override { freed = true; }
  [[nodiscard]] bool bridgeCongested() const override { return congested; }
  [[nodiscard]] bool bridgeHasRoom() const override { return !congested; }
  void onStreamReady(uint32_t) override {}

  std::vector<uint8_t> frameTypes;
  int deadlineChanges = 0;
  bool congested = false;
  bool freed = false;
};

}  // namespace

TEST_CASE(
    "client stream: a handshake period in which the bridge was congested is not the visitor's") {
  TestLoop loop;
  LocalServer echo(loop.get(), LocalServer::Mode::kEcho);
  CongestionHost host;
  auto context = ot::client::makeVisitorContext(pki().tunnelChain(), pki().tunnel.keyPem, false);
  REQUIRE(context.ok());
  ot::client::StreamOptions options;
  options.connId = 7;
  options.target = ot::client::LocalTarget{"127.0.0.1", echo.port()};
  options.tlsContext = context.value();
  options.handshakeTimeoutMs = 10'000;
  options.connectTimeoutMs = 5'000;  // earlier than the handshake's, and gone once connected
  ot::client::LocalStream* stream = ot::client::LocalStream::create(loop.get(), host, options);
  REQUIRE(stream != nullptr);
  stream->start();
  const uint64_t handshakeDeadline = uv_now(loop.get()) + 10'000;
  // Once connected to the local service, the handshake's is the stream's only deadline.
  REQUIRE(loop.runUntil([&] { return stream->deadlineMs() == handshakeDeadline; }));
  const uint64_t first = stream->deadlineMs();

  // Congested at the deadline: another period, nothing sent.
  host.congested = true;
  stream->onTimer(first);
  CHECK_FALSE(stream->protocolClosed());
  const uint64_t second = stream->deadlineMs();
  CHECK(second == first + 10'000);

  // Congested during the period and drained before its end (resume()): another period again.
  host.congested = false;
  stream->resume();
  stream->onTimer(second);
  CHECK_FALSE(stream->protocolClosed());
  const uint64_t third = stream->deadlineMs();
  CHECK(third == second + 10'000);

  // A whole period with the relay taking our bytes: the visitor had its time and is reset.
  stream->onTimer(third);
  CHECK(stream->protocolClosed());
  REQUIRE_FALSE(host.frameTypes.empty());
  CHECK(host.frameTypes.back() == static_cast<uint8_t>(ot::bridge::FrameKind::kReset));
  REQUIRE(loop.runUntil([&] { return host.freed; }));
}

namespace {

// A stream's host that records, for each frame the stream sends, how deep in frame batches it
// was sent (RelayTransport::beginBatch: the frames of one batch leave in one write).
class BatchHost final : public ot::client::StreamHost {
 public:
  void sendStreamFrame(std::span<const uint8_t> head, std::span<const uint8_t> payload) override {
    if (head.empty() || head[0] != static_cast<uint8_t>(ot::bridge::FrameKind::kData)) return;
    dataFrames.push_back({depth, batches});
    received.append(payload.begin(), payload.end());
  }
  void onStreamDeadlineChanged() override {}
  void onStreamFreed(uint32_t) override { freed = true; }
  [[nodiscard]] bool bridgeCongested() const override { return false; }
  [[nodiscard]] bool bridgeHasRoom() const override { return true; }
  void onStreamReady(uint32_t) override {}
  void beginFrameBatch() override {
    if (depth++ == 0) ++batches;
  }
  void endFrameBatch() override {
    REQUIRE(depth > 0);
    --depth;
  }

  struct Sent {
    int depth = 0;
    int batch = 0;  // which outermost batch it was in
  };
  std::vector<Sent> dataFrames;
  std::string received;
  int depth = 0;
  int batches = 0;
  bool freed = false;
};

}  // namespace

TEST_CASE("client stream: the data frames of one local read are sent as one batch") {
  TestLoop loop;
  const std::string body = pattern(48 * 1024);
  LocalServer source(loop.get(), LocalServer::Mode::kSource, body);
  BatchHost host;
  ot::client::StreamOptions options;
  options.connId = 9;
  options.target = ot::client::LocalTarget{"127.0.0.1", source.port()};
  options.maxPayload = 4096;  // a read of the body makes several frames
  ot::client::LocalStream* stream = ot::client::LocalStream::create(loop.get(), host, options);
  REQUIRE(stream != nullptr);
  stream->start();
  REQUIRE(loop.runUntil([&] { return host.received.size() == body.size(); }));
  CHECK(host.received == body);
  REQUIRE(host.dataFrames.size() >= body.size() / 4096);
  for (const auto& sent : host.dataFrames) CHECK(sent.depth == 1);
  // Fewer batches than frames: each read's frames went together (a read is at least 16 KiB
  // unless the kernel had less; the source wrote the body at once).
  CHECK(host.batches < static_cast<int>(host.dataFrames.size()));
  CHECK(host.depth == 0);
  stream->abort();
  REQUIRE(loop.runUntil([&] { return host.freed; }));
}
