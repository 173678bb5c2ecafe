// relayd's io_uring path (relayd/io_ring.h) under a TcpStream on a real loopback connection:
// an idle stream's reads come through the ring's armed receive, keep their order when the stream
// goes back to libuv and forth, are held while the owner does not read, and end in EOF or a close
// that waits for the receive; the sends of a batch go out at its end, in order with everything
// the stream writes after them, and a socket without room keeps the rest in the stream's queue.
#include "relayd/io_ring.h"

#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/prefetch.h"
#include "common/tcp_stream.h"
#include "relayd/relay_context.h"
#include "tests/relayd/loopback_pair.h"

using ot::TcpStream;
using ot::relayd::RelayContext;

namespace {

using ot::test::loopbackPair;

struct Recorder final : TcpStream::Handler {
  std::string read;
  bool eof = false;
  int error = 0;
  bool closed = false;
  std::function<void()> afterRead;  // e.g. the owner pauses inside its read
  // The prefetch stages asked of this handler, and those asked after its first read.
  mutable std::vector<unsigned> stagesBeforeRead;
  mutable int stagesAfterRead = 0;
  void prefetchForRead(unsigned stage) const override {
    if (read.empty()) {
      stagesBeforeRead.push_back(stage);
    } else {
      ++stagesAfterRead;
    }
  }
  void onRead(std::span<const uint8_t> bytes) override {
    read.append(bytes.begin(), bytes.end());
    if (afterRead) afterRead();
  }
  void onEof() override { eof = true; }
  void onStreamError(int status) override { error = status; }
  void onWritten(size_t) override {}
  void onClosed() override { closed = true; }
};

struct RingRig {
  uv_loop_t loop{};
  ot::metrics::Metrics registry;
  ot::relayd::RelayMetrics metrics{registry};
  ot::relayd::RelaydConfig config;
  std::optional<RelayContext> context;
  Recorder handler;
  TcpStream* stream = nullptr;
  int peer = -1;

  RingRig() {
    REQUIRE(uv_loop_init(&loop) == 0);
    context.emplace(&loop, config, metrics);
    // Where the kernel refuses io_uring relayd goes on without it; these tests need it.
    REQUIRE_MESSAGE(context->ring != nullptr, context->ringError);
    const auto [relayFd, peerFd] = loopbackPair();
    peer = peerFd;
    stream = TcpStream::adopt(*context, relayFd, &handler);
    REQUIRE(stream != nullptr);
  }
  ~RingRig() {
    if (!handler.closed) {
      stream->close(false);
      for (int i = 0; i < 100000 && !handler.closed; ++i) uv_run(&loop, UV_RUN_NOWAIT);
    }
    CHECK(handler.closed);
    if (peer >= 0) ::close(peer);
    context->closeHandles();
    uv_run(&loop, UV_RUN_DEFAULT);
    context.reset();
    CHECK(uv_loop_close(&loop) == 0);
  }
  RingRig(const RingRig&) = delete;
  RingRig& operator=(const RingRig&) = delete;

  void send(const std::string& text) const {
    REQUIRE(::send(peer, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()));
  }
  // Turns the loop until `done` holds (each turn waits at most for the next event or tick).
  template <typename Done>
  bool runUntil(Done done) {
    for (int i = 0; i < 2000 && !done(); ++i) uv_run(&loop, UV_RUN_ONCE);
    return done();
  }
  // Everything the peer can read now.
  std::string peerReads() const {
    std::string out;
    char buffer[65536];
    ssize_t n = 0;
    while ((n = ::recv(peer, buffer, sizeof buffer, 0)) > 0) out.append(buffer, size_t(n));
    return out;
  }
};

}  // namespace

TEST_CASE_FIXTURE(RingRig,
                  "io ring: an idle stream reads through the ring, in order across "
                  "switches to libuv and back") {
  stream->startReading();
  stream->setRingReads(true);
  CHECK(stream->ringReading());
  CHECK(stream->reading());
  std::string expected;
  for (int round = 0; round < 40; ++round) {
    const std::string piece = "piece " + std::to_string(round) + ";";
    send(piece);
    expected += piece;
    // Switch modes every few pieces, sometimes before the loop has seen the bytes.
    if (round % 3 == 0) stream->setRingReads(round % 2 == 0 ? false : true);
    if (round % 5 != 0) REQUIRE(runUntil([&] { return handler.read == expected; }));
  }
  REQUIRE(runUntil([&] { return handler.read == expected; }));
  CHECK(metrics.ringReceives.Value() >= 1);
  // Both paths were taken: with ring reads on, the stream is armed in the ring again.
  stream->setRingReads(true);
  REQUIRE(runUntil([&] { return context->ring->armedReceives() == 1; }));
  CHECK(metrics.ringArmed.Value() == 1);
}

TEST_CASE_FIXTURE(RingRig, "io ring: the peer's EOF ends the ring's receive as libuv would") {
  stream->startReading();
  stream->setRingReads(true);
  send("last words");
  REQUIRE(::shutdown(peer, SHUT_WR) == 0);
  REQUIRE(runUntil([&] { return handler.eof; }));
  CHECK(handler.read == "last words");
  CHECK_FALSE(stream->ringReading());
  CHECK(context->ring->armedReceives() == 0);
}

TEST_CASE_FIXTURE(RingRig,
                  "io ring: bytes are not delivered while the owner does not read, and "
                  "come in order once it reads again") {
  stream->startReading();
  stream->setRingReads(true);
  send("one;");
  REQUIRE(runUntil([&] { return handler.read == "one;"; }));
  // Sent before the pause is seen by the loop: the ring may already have taken them.
  send("two;");
  stream->stopReading();
  CHECK_FALSE(stream->reading());
  for (int i = 0; i < 50; ++i) uv_run(&loop, UV_RUN_NOWAIT);
  send("three;");
  for (int i = 0; i < 50; ++i) uv_run(&loop, UV_RUN_NOWAIT);
  CHECK(handler.read == "one;");
  stream->startReading();
  REQUIRE(runUntil([&] { return handler.read == "one;two;three;"; }));
  send("four;");
  REQUIRE(runUntil([&] { return handler.read == "one;two;three;four;"; }));
  CHECK(stream->ringReading());
}

TEST_CASE_FIXTURE(RingRig,
                  "io ring: what the ring took after the owner paused inside its read "
                  "is held, and comes first when it reads again") {
  stream->startReading();
  stream->setRingReads(true);
  REQUIRE(runUntil([&] { return context->ring->armedReceives() == 1; }));
  // More than one ring buffer (2 KiB): the receive completes it in pieces, in one round.
  std::string sent(6000, 'y');
  for (size_t i = 0; i < sent.size(); i += 100) sent[i] = static_cast<char>('A' + i / 100 % 26);
  handler.afterRead = [&] { stream->stopReading(); };
  send(sent);
  REQUIRE(runUntil([&] { return !handler.read.empty(); }));
  for (int i = 0; i < 50; ++i) uv_run(&loop, UV_RUN_NOWAIT);
  CHECK(handler.read.size() < sent.size());  // nothing more while paused
  handler.afterRead = nullptr;
  send("tail");
  stream->startReading();
  REQUIRE(runUntil([&] { return handler.read.size() >= sent.size() + 4; }));
  CHECK(handler.read == sent + "tail");
}

TEST_CASE_FIXTURE(RingRig,
                  "io ring: a close while the receive is armed waits for it to end, "
                  "then closes the socket") {
  stream->startReading();
  stream->setRingReads(true);
  REQUIRE(runUntil([&] { return context->ring->armedReceives() == 1; }));
  stream->close(true);
  CHECK_FALSE(handler.closed);  // the kernel still holds the socket for the receive
  REQUIRE(runUntil([&] { return handler.closed; }));
  CHECK(context->ring->armedReceives() == 0);
  // The peer sees the reset: the socket was really closed.
  char byte = 0;
  for (int i = 0; i < 1000; ++i) {
    const ssize_t n = ::recv(peer, &byte, 1, 0);
    if (n == 0 || (n < 0 && errno != EAGAIN)) break;
    uv_run(&loop, UV_RUN_NOWAIT);
  }
  CHECK(::recv(peer, &byte, 1, 0) <= 0);
}

TEST_CASE_FIXTURE(RingRig,
                  "io ring: a batch's sends go out at its end, before anything the "
                  "stream writes after them, and count as written") {
  ot::relayd::IoRing& ring = *context->ring;
  ring.beginSendBatch();
  CHECK(stream->writeNow(std::vector<uint8_t>{'p', 'i', 'n', 'g'}) == 0);
  CHECK(stream->bytesWritten() == 0);  // still in the batch
  // Another write to the same stream inside the batch sends the batch first.
  stream->write(std::vector<uint8_t>{'+'});
  CHECK(stream->bytesWritten() == 4);
  ring.endSendBatch();
  REQUIRE(runUntil([&] { return stream->queuedBytes() == 0; }));
  CHECK(stream->bytesWritten() == 5);
  std::string got;
  REQUIRE(runUntil([&] {
    got += peerReads();
    return got.size() >= 5;
  }));
  CHECK(got == "ping+");
  CHECK(metrics.ringSends.Value() == 1);

  // A close inside the batch sends the batch's bytes before the FIN.
  ring.beginSendBatch();
  CHECK(stream->writeNow(std::vector<uint8_t>{'b', 'y', 'e'}) == 0);
  stream->close(false);
  ring.endSendBatch();
  REQUIRE(runUntil([&] { return handler.closed; }));
  got.clear();
  REQUIRE(runUntil([&] {
    got += peerReads();
    return got.size() >= 3;
  }));
  CHECK(got == "bye");
}

TEST_CASE_FIXTURE(RingRig,
                  "io ring: what a batched send could not hand to the socket waits in "
                  "the stream's queue and arrives whole") {
  // More than the small socket buffers take while the peer does not read: a short send.
  std::string sent(1024 * 1024, 'x');
  for (size_t i = 0; i < sent.size(); i += 4096) sent[i] = static_cast<char>('a' + i / 4096 % 26);
  ot::relayd::IoRing& ring = *context->ring;
  ring.beginSendBatch();
  CHECK(stream->writeNow(std::vector<uint8_t>(sent.begin(), sent.end())) == 0);
  ring.endSendBatch();
  CHECK(metrics.ringSends.Value() == 1);
  CHECK(stream->queuedBytes() > 0);
  CHECK(stream->bytesWritten() + stream->queuedBytes() == sent.size());
  std::string got;
  REQUIRE(runUntil([&] {
    got += peerReads();
    return got.size() >= sent.size();
  }));
  CHECK(got == sent);
  REQUIRE(runUntil([&] { return stream->queuedBytes() == 0; }));
  CHECK(stream->bytesWritten() == sent.size());
}

TEST_CASE_FIXTURE(RingRig,
                  "io ring: catchUp finishes what the kernel holds without waiting for the loop") {
  stream->startReading();
  stream->setRingReads(true);
  REQUIRE(runUntil([&] { return context->ring->armedReceives() == 1; }));
  uv_run(&loop, UV_RUN_NOWAIT);  // the receive goes to the kernel before the loop would wait
  // The peer leaves while the loop is not turning (as when it is busy with a visitor): its
  // words and EOF wait in the kernel for relayd's thread to ask.
  send("bye");
  REQUIRE(::shutdown(peer, SHUT_WR) == 0);
  CHECK_FALSE(handler.eof);
  context->ring->catchUp();  // what relayd does before it routes a visitor to a bridge
  CHECK(handler.read == "bye");
  CHECK(handler.eof);
  CHECK(context->ring->armedReceives() == 0);
  context->ring->catchUp();  // nothing pending: nothing happens
  CHECK(handler.read == "bye");
}

TEST_CASE_FIXTURE(RingRig,
                  "io ring: a burst of receives on many idle streams is delivered in one go, "
                  "none left waiting for a later event") {
  // More streams than the kernel finishes per io_uring_enter (20 since 6.10): the rest of the
  // burst must come without another event, since none comes here.
  constexpr int kStreams = 64;
  std::vector<Recorder> handlers(kStreams);
  std::vector<TcpStream*> streams;
  std::vector<int> peers;
  for (auto& each : handlers) {
    const auto [relayFd, peerFd] = loopbackPair();
    peers.push_back(peerFd);
    streams.push_back(TcpStream::adopt(*context, relayFd, &each));
    REQUIRE(streams.back() != nullptr);
    streams.back()->startReading();
    streams.back()->setRingReads(true);
  }
  REQUIRE(runUntil([&] { return context->ring->armedReceives() == kStreams; }));
  uv_run(&loop, UV_RUN_NOWAIT);  // the receives go to the kernel, waiting for data
  // Every pong is in the kernel before the loop wakes.
  for (int peerFd : peers) REQUIRE(::send(peerFd, "pong", 4, 0) == 4);
  const auto delivered = [&] {
    return std::all_of(handlers.begin(), handlers.end(),
                       [](const Recorder& each) { return each.read == "pong"; });
  };
  // A timer bounds the wait: a burst left behind would wait forever.
  uv_timer_t bound{};
  REQUIRE(uv_timer_init(&loop, &bound) == 0);
  bool expired = false;
  bound.data = &expired;
  uv_timer_start(
      &bound, [](uv_timer_t* timer) { *static_cast<bool*>(timer->data) = true; }, 10'000, 0);
  while (!delivered() && !expired) uv_run(&loop, UV_RUN_ONCE);
  uv_close(reinterpret_cast<uv_handle_t*>(&bound), nullptr);
  CHECK(delivered());
  CHECK(metrics.ringReceives.Value() >= kStreams);
  // Before a run of completions is delivered, their streams and handlers are asked for a stage
  // at a time (IoRing::prefetchReceivers): a handler's stages come in order, before its data.
  // A stream alone in what the kernel had posted is not, so not every handler sees them.
  const std::vector<unsigned> allStages = [] {
    std::vector<unsigned> stages;
    for (unsigned stage = 0; stage + 1 < ot::kPrefetchStages; ++stage) {
      stages.push_back(stage);
    }
    return stages;
  }();
  int prefetched = 0;
  for (const Recorder& each : handlers) {
    CHECK(each.stagesAfterRead == 0);
    if (each.stagesBeforeRead.empty()) continue;
    CHECK(each.stagesBeforeRead == allStages);
    ++prefetched;
  }
  CHECK(prefetched >= kStreams / 2);

  for (TcpStream* each : streams) each->close(false);
  REQUIRE(runUntil([&] {
    return std::all_of(handlers.begin(), handlers.end(),
                       [](const Recorder& each) { return each.closed; });
  }));
  for (int peerFd : peers) ::close(peerFd);
}
