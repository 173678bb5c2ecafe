// VisitorStream alone: a real visitor socket (a loopback pair on a private loop) and a fake bridge
// (BridgeForStream) that records the frames the stream asks for, with time on a ManualClock that
// drives the relay's timer wheel. Credit spent and granted back, a stalled visitor reset within
// one wait, end and reset in each direction.
#include "relayd/visitor_stream.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "common/tcp_stream.h"
#include "relayd/relay_context.h"
#include "relayd/stream_bridge.h"
#include "tests/relayd/loopback_pair.h"
#include "tests/relayd/manual_relay_loop.h"

using ot::TcpStream;
using ot::relayd::BridgeForStream;
using ot::relayd::RelayContext;
using ot::relayd::StreamForBridge;
using ot::relayd::VisitorStream;
namespace bridge = ot::bridge;

namespace {

using ot::test::loopbackPair;

constexpr uint32_t kConnId = 7;

// What the stream asked of its bridge, in order.
struct FakeBridge final : BridgeForStream {
  std::string dataSent;  // payloads of data frames, concatenated
  size_t dataFrames = 0;
  size_t ends = 0;
  std::vector<bridge::ResetReason> resets;
  uint64_t credited = 0;
  int64_t buffered = 0;
  bool finished = false;
  uint64_t finishedIn = 0;
  uint64_t finishedOut = 0;

  void sendData(uint32_t connId, std::span<const uint8_t> payload) override {
    CHECK(connId == kConnId);
    CHECK_FALSE(payload.empty());
    dataSent.append(payload.begin(), payload.end());
    ++dataFrames;
  }
  void sendEnd(uint32_t connId) override {
    CHECK(connId == kConnId);
    ++ends;
  }
  void sendReset(uint32_t connId, bridge::ResetReason reason) override {
    CHECK(connId == kConnId);
    resets.push_back(reason);
  }
  void sendCredit(uint32_t connId, uint32_t increment) override {
    CHECK(connId == kConnId);
    credited += increment;
  }
  void visitorBuffered(int64_t delta) override { buffered += delta; }
  void streamFinished(StreamForBridge* stream, uint64_t bytesIn, uint64_t bytesOut) override {
    CHECK(stream->connId() == kConnId);
    CHECK_FALSE(finished);
    finished = true;
    finishedIn = bytesIn;
    finishedOut = bytesOut;
  }
};

std::vector<uint8_t> bytesOf(size_t n, char fill) {
  return std::vector<uint8_t>(n, static_cast<uint8_t>(fill));
}

// A loop with a relay context on a manual clock, one VisitorStream on the relay side of a loopback
// pair started on a fake bridge, and the visitor's socket.
struct VisitorRig : ot::test::ManualRelayLoop {
  FakeBridge fake;
  VisitorStream* visitor = nullptr;
  int peer = -1;

  // Starts the stream with the client's window `window` and `hello` as its first bytes.
  void start(uint32_t window, std::vector<uint8_t> hello) {
    const auto [relayFd, visitorFd] = loopbackPair();
    peer = visitorFd;
    TcpStream* stream = TcpStream::adopt(*context, relayFd, nullptr);
    REQUIRE(stream != nullptr);
    visitor = new VisitorStream(*context, stream, "t1", window);
    visitor->start(&fake, kConnId, std::move(hello));
  }
  VisitorRig() = default;
  ~VisitorRig() {
    if (!context->streams.empty()) {
      if (!fake.finished) visitor->abort(bridge::ResetReason::kUnspecified, false);
      runUntil([&] { return context->streams.empty(); });
    }
    if (peer >= 0) ::close(peer);
  }
  VisitorRig(const VisitorRig&) = delete;
  VisitorRig& operator=(const VisitorRig&) = delete;

  // Runs the loop (without moving the manual clock) until `done`, or gives up.
  bool runUntil(const std::function<bool()>& done) {
    for (int i = 0; i < 200000 && !done(); ++i) {
      uv_run(&loop, UV_RUN_NOWAIT);
      if (i > 1000) ::usleep(50);
    }
    return done();
  }
  // Moves time on and fires what is due.
  void advance(int64_t ms) {
    clock->advance(ms);
    context->wheel.advance(context->nowMs());
  }
  size_t readPeer() {
    std::vector<char> buffer(256 * 1024);
    size_t got = 0;
    for (;;) {
      const ssize_t n = ::recv(peer, buffer.data(), buffer.size(), 0);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    return got;
  }
  void sendPeer(size_t n, char fill) {
    const auto bytes = bytesOf(n, fill);
    size_t sent = 0;
    while (sent < n) {
      const ssize_t s = ::send(peer, bytes.data() + sent, n - sent, 0);
      if (s > 0) sent += static_cast<size_t>(s);
      uv_run(&loop, UV_RUN_NOWAIT);
    }
  }
};

}  // namespace

TEST_CASE_FIXTURE(VisitorRig,
                  "visitor stream: sends the hello, then no more than the client's credit") {
  start(1000, bytesOf(100, 'h'));
  CHECK(fake.dataSent == std::string(100, 'h'));
  sendPeer(4000, 'v');
  REQUIRE(runUntil([&] { return fake.dataSent.size() >= 1000; }));
  for (int i = 0; i < 200; ++i) uv_run(&loop, UV_RUN_NOWAIT);
  // The window is spent: the rest is held (and the socket no longer read) until credit comes.
  CHECK(fake.dataSent.size() == 1000);
  REQUIRE(visitor->addSendCredit(1500));
  CHECK(fake.dataSent.size() == 2500);
  REQUIRE(visitor->addSendCredit(100'000));
  REQUIRE(runUntil([&] { return fake.dataSent.size() == 4100; }));
  CHECK(fake.dataSent == std::string(100, 'h') + std::string(4000, 'v'));
  // Credit past 2^31 - 1 is the client's protocol error.
  CHECK_FALSE(visitor->addSendCredit(0x7FFFFFFFu));
}

TEST_CASE_FIXTURE(VisitorRig,
                  "visitor stream: what the visitor took is credited back in quarter windows") {
  start(bridge::kDefaultWindow, bytesOf(10, 'h'));
  const size_t quarter = bridge::kRelayWindow / 4;
  size_t delivered = 0;
  size_t read = 0;
  while (delivered < quarter - bridge::kMaxDataPayload) {
    visitor->deliver(bytesOf(bridge::kMaxDataPayload, 'c'));
    delivered += bridge::kMaxDataPayload;
  }
  // What the socket took at once is no longer pending; the bridge's count is the visitor's.
  CHECK(fake.buffered == static_cast<int64_t>(visitor->pendingToVisitor()));
  CHECK(visitor->pendingToVisitor() <= delivered);
  REQUIRE(runUntil([&] {
    read += readPeer();
    return read == delivered && visitor->pendingToVisitor() == 0;
  }));
  // Taken, but less than a quarter window: nothing granted yet.
  CHECK(fake.credited == 0);
  CHECK(fake.buffered == 0);
  visitor->deliver(bytesOf(bridge::kMaxDataPayload, 'c'));
  delivered += bridge::kMaxDataPayload;
  REQUIRE(runUntil([&] {
    read += readPeer();
    return fake.credited > 0;
  }));
  CHECK(fake.credited == quarter);
}

TEST_CASE_FIXTURE(
    VisitorRig,
    "visitor stream: a visitor that stops reading is reset as too_slow within one wait") {
  start(bridge::kDefaultWindow, bytesOf(10, 'h'));
  // A whole window behind (the kernel takes a little of it): the stall wait starts.
  for (size_t sent = 0; sent < bridge::kRelayWindow; sent += bridge::kMaxDataPayload) {
    visitor->deliver(bytesOf(bridge::kMaxDataPayload, 's'));
  }
  for (int i = 0; i < 200; ++i) uv_run(&loop, UV_RUN_NOWAIT);
  REQUIRE(visitor->pendingToVisitor() >= bridge::kRelayWindow / 2);
  advance(static_cast<int64_t>(ot::relayd::kSlowVisitorWaitMs) - 500);
  CHECK(fake.resets.empty());
  CHECK_FALSE(fake.finished);
  advance(500 + context->wheel.tickMs());
  REQUIRE(fake.resets.size() == 1);
  CHECK(fake.resets[0] == bridge::ResetReason::kTooSlow);
  CHECK(fake.finished);
  CHECK(fake.buffered == 0);  // its unwritten data no longer counts against the bridge
  CHECK(metrics.backpressureReset.Value() == 1);
}

TEST_CASE_FIXTURE(VisitorRig,
                  "visitor stream: a slow visitor that keeps taking data is not reset") {
  start(bridge::kDefaultWindow, bytesOf(10, 'h'));
  for (size_t sent = 0; sent < bridge::kRelayWindow; sent += bridge::kMaxDataPayload) {
    visitor->deliver(bytesOf(bridge::kMaxDataPayload, 's'));
  }
  for (int wait = 0; wait < 3; ++wait) {
    // Takes well over 64 KiB per wait, but stays half a window behind.
    size_t read = 0;
    REQUIRE(runUntil([&] {
      read += readPeer();
      return read >= 2 * ot::relayd::kSlowVisitorProgressBytes;
    }));
    for (size_t sent = 0; sent < read; sent += bridge::kMaxDataPayload) {
      visitor->deliver(bytesOf(bridge::kMaxDataPayload, 's'));
    }
    advance(static_cast<int64_t>(ot::relayd::kSlowVisitorWaitMs) + context->wheel.tickMs());
    CHECK(fake.resets.empty());
  }
  CHECK_FALSE(fake.finished);
}

TEST_CASE_FIXTURE(
    VisitorRig,
    "visitor stream: the visitor's FIN goes to the bridge as end; the client may still send") {
  start(bridge::kDefaultWindow, bytesOf(10, 'h'));
  visitor->deliver(bytesOf(100, 'a'));  // the visitor has heard from the client
  size_t read = 0;
  REQUIRE(runUntil([&] {
    read += readPeer();
    return read == 100;
  }));
  REQUIRE(::shutdown(peer, SHUT_WR) == 0);
  REQUIRE(runUntil([&] { return fake.ends == 1; }));
  CHECK(fake.resets.empty());
  CHECK_FALSE(fake.finished);  // half closed: the client may still send
  visitor->deliver(bytesOf(50, 'b'));
  visitor->peerEnded();
  // The visitor reads the rest, then EOF; the stream is complete.
  bool eof = false;
  REQUIRE(runUntil([&] {
    char buffer[256];
    const ssize_t n = ::recv(peer, buffer, sizeof buffer, 0);
    if (n > 0) read += static_cast<size_t>(n);
    if (n == 0) eof = true;
    return eof && fake.finished;
  }));
  CHECK(read == 150);
  CHECK(fake.resets.empty());
  CHECK(fake.finishedOut == 150);
  CHECK(fake.finishedIn == 10);
}

TEST_CASE_FIXTURE(
    VisitorRig,
    "visitor stream: the client's end reaches the visitor as FIN; the visitor may still send") {
  start(bridge::kDefaultWindow, bytesOf(10, 'h'));
  visitor->deliver(bytesOf(100, 'a'));
  visitor->peerEnded();
  size_t read = 0;
  bool eof = false;
  REQUIRE(runUntil([&] {
    char buffer[256];
    const ssize_t n = ::recv(peer, buffer, sizeof buffer, 0);
    if (n > 0) read += static_cast<size_t>(n);
    if (n == 0) eof = true;
    return eof;
  }));
  CHECK(read == 100);
  CHECK_FALSE(fake.finished);  // half closed: the visitor's side is still open
  sendPeer(300, 'v');
  REQUIRE(runUntil([&] { return fake.dataSent.size() == 310; }));
  REQUIRE(::shutdown(peer, SHUT_WR) == 0);
  REQUIRE(runUntil([&] { return fake.finished; }));
  CHECK(fake.ends == 1);
  CHECK(fake.resets.empty());
}

TEST_CASE_FIXTURE(VisitorRig, "visitor stream: a visitor's RST goes to the bridge as reset") {
  start(bridge::kDefaultWindow, bytesOf(10, 'h'));
  const linger abortive{1, 0};
  REQUIRE(::setsockopt(peer, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive) == 0);
  ::close(peer);
  peer = -1;
  REQUIRE(runUntil([&] { return fake.finished; }));
  REQUIRE(fake.resets.size() == 1);
  CHECK(fake.resets[0] == bridge::ResetReason::kVisitorIoError);
  CHECK(fake.ends == 0);
}

TEST_CASE_FIXTURE(VisitorRig, "visitor stream: the client's reset aborts the visitor with an RST") {
  start(bridge::kDefaultWindow, bytesOf(10, 'h'));
  visitor->peerReset();
  CHECK(fake.finished);
  CHECK(fake.resets.empty());  // the client knows: no reset is sent back
  int error = 0;
  REQUIRE(runUntil([&] {
    char buffer[64];
    const ssize_t n = ::recv(peer, buffer, sizeof buffer, 0);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) error = errno;
    return error != 0 || n == 0;
  }));
  CHECK(error == ECONNRESET);
}

TEST_CASE("visitor stream: a lagging visitor's cut-off is about 6 KiB/s, as the reference's") {
  using ot::relayd::kSlowVisitorWaitMs;
  using ot::relayd::laggingVisitorTooSlow;
  const uint64_t start = 1'000'000;
  // 40 KiB in one 5 s wait (8 KiB/s, a slow mobile link): kept.
  CHECK_FALSE(laggingVisitorTooSlow(start, start + 40 * 1024));
  // 6.4 KiB/s is the line: 32 KiB per wait.
  CHECK_FALSE(laggingVisitorTooSlow(start, start + 32 * 1024));
  CHECK(laggingVisitorTooSlow(start, start + 32 * 1024 - 1));
  CHECK(laggingVisitorTooSlow(start, start));
  CHECK(kSlowVisitorWaitMs == 5'000);
}
