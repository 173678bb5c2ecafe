// TcpStream's peer write backlog on a real loopback connection whose peer does not read: the
// stream stops reading that peer above the high mark, reads again once the peer took the queue
// down to the low mark, resets it past the hard limit, and every queued byte is counted in the
// process's buffered bytes until its write ended.
// readNow() takes what the socket holds at once, or says there was nothing.
#include "common/tcp_stream.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>
#include <vector>

#include "common/metrics.h"
#include "relayd/relay_context.h"
#include "tests/relayd/loopback_pair.h"

using ot::TcpStream;
using ot::relayd::RelayContext;

namespace {

using ot::test::loopbackPair;

struct Recorder final : TcpStream::Handler {
  size_t readBytes = 0;
  size_t written = 0;
  bool closed = false;
  bool eof = false;
  void onRead(std::span<const uint8_t> bytes) override { readBytes += bytes.size(); }
  void onEof() override { eof = true; }
  void onStreamError(int) override {}
  void onWritten(size_t bytes) override { written += bytes; }
  void onClosed() override { closed = true; }
};

// Reads and drops what the peer has, without blocking; true if it got anything.
bool drainPeer(int peer) {
  std::vector<char> buffer(256 * 1024);
  bool got = false;
  while (::recv(peer, buffer.data(), buffer.size(), 0) > 0) got = true;
  return got;
}

// The tests' fixture: a loop with a relay context, and one TcpStream adopted on the relay side of a
// loopback pair; everything closed and the loop checked empty at the end.
struct StreamRig {
  uv_loop_t loop{};
  ot::metrics::Metrics registry;
  ot::relayd::RelayMetrics metrics{registry};
  ot::relayd::RelaydConfig config;
  std::optional<RelayContext> context;
  Recorder handler;
  TcpStream* stream = nullptr;
  int peer = -1;

  StreamRig() {
    REQUIRE(uv_loop_init(&loop) == 0);
    context.emplace(&loop, config, metrics);
    const auto [relayFd, peerFd] = loopbackPair();
    peer = peerFd;
    stream = TcpStream::adopt(*context, relayFd, &handler);
    REQUIRE(stream != nullptr);
  }
  ~StreamRig() {
    if (!handler.closed) {
      stream->close(false);
      while (!handler.closed) uv_run(&loop, UV_RUN_ONCE);
    }
    ::close(peer);
    context->closeHandles();
    uv_run(&loop, UV_RUN_DEFAULT);
    context.reset();
    CHECK(uv_loop_close(&loop) == 0);
  }
  StreamRig(const StreamRig&) = delete;
  StreamRig& operator=(const StreamRig&) = delete;
};

}  // namespace

TEST_CASE_FIXTURE(
    StreamRig,
    "tcp stream: an unread peer is paused above the high mark, read again at the low one") {
  {
    stream->startReading();
    constexpr auto marks = ot::relayd::kPeerWriteBacklog;
    const size_t chunk = 256 * 1024;

    // Up to the high mark the peer is read; past it, not, though the owner still wants it.
    size_t queued = 0;
    while (queued + chunk + ot::kWriteOverheadBytes <= marks.high) {
      stream->write(std::vector<uint8_t>(chunk, 'x'));
      queued += chunk;
      CHECK(stream->reading());
    }
    stream->write(std::vector<uint8_t>(chunk, 'x'));
    queued += chunk;
    CHECK(stream->writeBacklogged());
    CHECK_FALSE(stream->reading());
    CHECK(metrics.peerBacklogPaused.Value() == 1);
    // Counted in the process's buffered bytes, with the per-write charge.
    const size_t writes = queued / chunk;
    CHECK(context->bufferedBytes == queued + writes * ot::kWriteOverheadBytes);

    // The peer sends a request: it is not read while its answers wait.
    REQUIRE(::send(peer, "ping", 4, 0) == 4);
    for (int i = 0; i < 20; ++i) uv_run(&loop, UV_RUN_NOWAIT);
    CHECK(handler.readBytes == 0);

    // The peer reads: once the queue is at the low mark, the stream reads it again.
    for (int i = 0; i < 100000 && stream->writeBacklogged(); ++i) {
      drainPeer(peer);
      uv_run(&loop, UV_RUN_NOWAIT);
    }
    CHECK_FALSE(stream->writeBacklogged());
    CHECK(stream->queuedBytes() <= marks.low);
    for (int i = 0; i < 100000 && handler.readBytes < 4; ++i) {
      drainPeer(peer);
      uv_run(&loop, UV_RUN_NOWAIT);
    }
    CHECK(handler.readBytes == 4);

    // Everything written: nothing is counted any more.
    for (int i = 0; i < 100000 && stream->queuedBytes() > 0; ++i) {
      drainPeer(peer);
      uv_run(&loop, UV_RUN_NOWAIT);
    }
    CHECK(handler.written == queued);
    CHECK(context->bufferedBytes == 0);
    CHECK(metrics.peerBacklogReset.Value() == 0);
  }
}

TEST_CASE_FIXTURE(
    StreamRig,
    "tcp stream: a write past the hard limit resets the peer and gives everything back") {
  {
    constexpr auto marks = ot::relayd::kPeerWriteBacklog;
    const size_t chunk = 1024 * 1024;
    size_t queued = 0;
    // Each write is refused once it would pass the hard limit: the last one closes the stream.
    while (!stream->closing()) {
      stream->write(std::vector<uint8_t>(chunk, 'y'));
      if (!stream->closing()) queued += chunk;
      REQUIRE(queued <= marks.hardLimit);
    }
    CHECK(queued + ot::kWriteOverheadBytes * (queued / chunk + 1) + chunk > marks.hardLimit);
    CHECK(metrics.peerBacklogReset.Value() == 1);
    while (!handler.closed) uv_run(&loop, UV_RUN_ONCE);
    // The cancelled writes were given back.
    CHECK(context->bufferedBytes == 0);
    // The peer sees a reset (or the end), never more than the kernel took.
    std::vector<char> buffer(64 * 1024);
    ssize_t n = 0;
    size_t received = 0;
    for (int i = 0; i < 1000; ++i) {
      n = ::recv(peer, buffer.data(), buffer.size(), 0);
      if (n > 0) {
        received += static_cast<size_t>(n);
        continue;
      }
      if (n == 0 || errno != EAGAIN) break;
      usleep(1000);
    }
    CHECK(received < queued);
  }
}

TEST_CASE_FIXTURE(StreamRig,
                  "tcp stream: writeCopy writes at once and copies only what the socket left") {
  // More than a loopback socket takes at once, from a buffer reused (overwritten) right after
  // each call, as relayd reuses its decrypted-record buffer: the peer must get the bytes as they
  // were at the call, and every byte is either answered as taken or reported by onWritten.
  const size_t size = 3 * 1024 * 1024;  // 12 MiB in all: under relayd's 20 MiB hard limit
  std::vector<uint8_t> source(size);
  std::vector<uint8_t> expected;
  size_t takenAtOnce = 0;
  for (uint8_t round = 0; round < 3; ++round) {
    for (size_t i = 0; i < size; ++i) source[i] = static_cast<uint8_t>(i * 7 + round);
    expected.insert(expected.end(), source.begin(), source.end());
    takenAtOnce += stream->writeCopy(source);
    std::fill(source.begin(), source.end(), 0xAB);  // the buffer is reused
  }
  // writeNow: the vector itself is queued from where the kernel stopped.
  std::vector<uint8_t> owned(size);
  for (size_t i = 0; i < size; ++i) owned[i] = static_cast<uint8_t>(i * 13 + 1);
  expected.insert(expected.end(), owned.begin(), owned.end());
  takenAtOnce += stream->writeNow(std::move(owned));
  CHECK(takenAtOnce > 0);  // the first write went straight to the kernel
  CHECK(takenAtOnce < expected.size());
  CHECK(stream->queuedBytes() == expected.size() - takenAtOnce);

  std::vector<uint8_t> received;
  std::vector<uint8_t> buffer(256 * 1024);
  for (int i = 0; i < 1000000 && received.size() < expected.size(); ++i) {
    const ssize_t n = ::recv(peer, buffer.data(), buffer.size(), 0);
    if (n > 0) received.insert(received.end(), buffer.begin(), buffer.begin() + n);
    uv_run(&loop, UV_RUN_NOWAIT);
  }
  for (int i = 0; i < 1000 && stream->queuedBytes() > 0; ++i) uv_run(&loop, UV_RUN_NOWAIT);
  CHECK(received.size() == expected.size());
  CHECK(received == expected);
  CHECK(handler.written + takenAtOnce == expected.size());
  CHECK(stream->bytesWritten() == expected.size());
  CHECK(context->bufferedBytes == 0);
}

TEST_CASE_FIXTURE(StreamRig, "tcp stream: readNow takes what is there at once, or reports none") {
  // Nothing sent yet: nothing heard, and the stream is not reading (the owner starts it).
  CHECK_FALSE(stream->readNow());
  CHECK(handler.readBytes == 0);
  CHECK_FALSE(stream->reading());

  // Bytes in the socket: delivered from inside the call, without the loop running.
  REQUIRE(::send(peer, "hello", 5, 0) == 5);
  CHECK(stream->readNow());
  CHECK(handler.readBytes == 5);
  CHECK_FALSE(stream->reading());
  CHECK_FALSE(stream->readNow());  // all taken

  // Once reading, it leaves the socket to libuv (order stays libuv's).
  stream->startReading();
  REQUIRE(::send(peer, "more", 4, 0) == 4);
  CHECK_FALSE(stream->readNow());
  for (int i = 0; i < 100000 && handler.readBytes < 9; ++i) uv_run(&loop, UV_RUN_NOWAIT);
  CHECK(handler.readBytes == 9);
  stream->stopReading();

  // The peer's end: heard as an EOF.
  ::shutdown(peer, SHUT_WR);
  CHECK(stream->readNow());
  CHECK(handler.eof);
}
