// ForwardSplice alone: two real loopback pairs on a private loop (the visitor's socket and the
// holder's), with time on a ManualClock driving the relay's timer wheel. Bytes both ways,
// backpressure (the fast side is not read while the slow side's queue is over the mark),
// half-closes passed on both ways, the idle and half-close timeouts, and a reset on one side
// resetting the other.
#include "relayd/forward_splice.h"

#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <string>
#include <vector>

#include "common/tcp_stream.h"
#include "tests/relayd/loopback_pair.h"
#include "tests/relayd/manual_relay_loop.h"

using ot::TcpStream;
using ot::relayd::ForwardSplice;

namespace {

// What a peer socket saw when reading: bytes, and how it ended.
struct PeerRead {
  std::string bytes;
  bool eof = false;
  bool reset = false;
};

struct SpliceRig : ot::test::ManualRelayLoop {
  int visitorPeer = -1;  // the visitor's end
  int holderPeer = -1;   // the holder relayd's end
  TcpStream* visitor = nullptr;
  TcpStream* holder = nullptr;
  ForwardSplice* splice = nullptr;

  void start(ot::WriteBacklogMarks marks = ot::relayd::kForwardSpliceMarks,
             std::string toVisitor = {}) {
    config.connectionIdleTimeoutMs = 60'000;
    config.halfCloseTimeoutMs = 5'000;
    const auto [visitorFd, visitorPeerFd] = ot::test::loopbackPair();
    const auto [holderFd, holderPeerFd] = ot::test::loopbackPair();
    visitorPeer = visitorPeerFd;
    holderPeer = holderPeerFd;
    visitor = TcpStream::adopt(*context, visitorFd, nullptr);
    holder = TcpStream::adopt(*context, holderFd, nullptr);
    REQUIRE(visitor != nullptr);
    REQUIRE(holder != nullptr);
    ++context->openConnections;  // the visitor's, as an accepted public socket
    splice = ForwardSplice::start(
        *context, visitor, holder,
        std::span(reinterpret_cast<const uint8_t*>(toVisitor.data()), toVisitor.size()), marks);
    splice->countsOpenConnection();
  }
  SpliceRig() = default;
  ~SpliceRig() {
    if (!context->streams.empty()) {
      for (TcpStream* stream : std::vector(context->streams.begin(), context->streams.end()))
        stream->close(true);
      runUntil([&] { return context->streams.empty(); });
    }
    if (visitorPeer >= 0) ::close(visitorPeer);
    if (holderPeer >= 0) ::close(holderPeer);
  }
  SpliceRig(const SpliceRig&) = delete;
  SpliceRig& operator=(const SpliceRig&) = delete;

  bool runUntil(const std::function<bool()>& done) {
    for (int i = 0; i < 200000 && !done(); ++i) {
      uv_run(&loop, UV_RUN_NOWAIT);
      if (i > 1000) ::usleep(50);
    }
    return done();
  }
  void advance(int64_t ms) {
    clock->advance(ms);
    context->wheel.advance(context->nowMs());
  }
  static void sendAll(int fd, const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      REQUIRE((n > 0 || errno == EAGAIN));
      if (n > 0) sent += static_cast<size_t>(n);
    }
  }
  static void drain(int fd, PeerRead& into) {
    char buffer[65536];
    for (;;) {
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n > 0) {
        into.bytes.append(buffer, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) into.eof = true;
      if (n < 0 && errno == ECONNRESET) into.reset = true;
      return;
    }
  }
  // Reads `fd` while running the loop until `done`.
  bool readUntil(int fd, PeerRead& into, const std::function<bool()>& done) {
    return runUntil([&] {
      drain(fd, into);
      return done();
    });
  }
};

}  // namespace

TEST_CASE_FIXTURE(SpliceRig, "forward splice: copies both ways, bytes read early go first") {
  start(ot::relayd::kForwardSpliceMarks, "early");
  sendAll(visitorPeer, "hello from the visitor");
  sendAll(holderPeer, " and the holder");
  PeerRead atHolder;
  PeerRead atVisitor;
  REQUIRE(readUntil(holderPeer, atHolder, [&] { return atHolder.bytes.size() == 22; }));
  REQUIRE(readUntil(visitorPeer, atVisitor, [&] { return atVisitor.bytes.size() == 20; }));
  CHECK(atHolder.bytes == "hello from the visitor");
  CHECK(atVisitor.bytes == "early and the holder");
  CHECK(splice->bytesToHolder() == 22);
  CHECK(splice->bytesToVisitor() == 20);  // the early bytes included
}

TEST_CASE_FIXTURE(SpliceRig,
                  "forward splice: a side that does not read stops the other being read") {
  start(ot::WriteBacklogMarks{64 * 1024, 16 * 1024, 20u << 20});
  // The holder's peer reads nothing: the visitor is read until the holder's queue passes the mark.
  const std::string chunk(64 * 1024, 'v');
  size_t sent = 0;
  REQUIRE(runUntil([&] {
    const ssize_t n = ::send(visitorPeer, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n > 0) sent += static_cast<size_t>(n);
    return !visitor->reading() && holder->queuedBytes() > 64 * 1024;
  }));
  // Bounded: what is held in user space is about the mark, whatever the visitor still pushes.
  for (int i = 0; i < 2000; ++i) {
    (void)::send(visitorPeer, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    uv_run(&loop, UV_RUN_NOWAIT);
  }
  CHECK(holder->queuedBytes() < 64 * 1024 + 65536 + 1);
  CHECK_FALSE(visitor->reading());
  // Once the holder reads, the queue drains and the visitor is read again: nothing is lost.
  PeerRead atHolder;
  REQUIRE(readUntil(holderPeer, atHolder, [&] { return visitor->reading(); }));
  // Stop pushing and take everything sent.
  for (;;) {
    const ssize_t n = ::send(visitorPeer, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  REQUIRE(readUntil(holderPeer, atHolder, [&] { return atHolder.bytes.size() >= sent; }));
  CHECK(atHolder.bytes.size() >= sent);
}

TEST_CASE_FIXTURE(SpliceRig, "forward splice: half-closes pass on both ways, then both close") {
  start();
  sendAll(visitorPeer, "request");
  ::shutdown(visitorPeer, SHUT_WR);
  PeerRead atHolder;
  REQUIRE(readUntil(holderPeer, atHolder, [&] { return atHolder.eof; }));
  CHECK(atHolder.bytes == "request");
  // The other direction still flows after one side's FIN.
  sendAll(holderPeer, "response");
  PeerRead atVisitor;
  REQUIRE(readUntil(visitorPeer, atVisitor, [&] { return atVisitor.bytes == "response"; }));
  CHECK_FALSE(atVisitor.eof);
  ::shutdown(holderPeer, SHUT_WR);
  REQUIRE(readUntil(visitorPeer, atVisitor, [&] { return atVisitor.eof; }));
  CHECK_FALSE(atVisitor.reset);
  REQUIRE(runUntil([&] { return context->streams.empty(); }));
  CHECK(context->openConnections == 0);
}

TEST_CASE_FIXTURE(SpliceRig, "forward splice: the holder's FIN passes on to the visitor too") {
  start();
  sendAll(holderPeer, "bye");
  ::shutdown(holderPeer, SHUT_WR);
  PeerRead atVisitor;
  REQUIRE(readUntil(visitorPeer, atVisitor, [&] { return atVisitor.eof; }));
  CHECK(atVisitor.bytes == "bye");
  sendAll(visitorPeer, "ok");
  PeerRead atHolder;
  REQUIRE(readUntil(holderPeer, atHolder, [&] { return atHolder.bytes == "ok"; }));
}

TEST_CASE_FIXTURE(SpliceRig, "forward splice: idle past the idle timeout resets both sides") {
  start();
  sendAll(visitorPeer, "x");
  PeerRead atHolder;
  REQUIRE(readUntil(holderPeer, atHolder, [&] { return atHolder.bytes == "x"; }));
  advance(59'000);
  for (int i = 0; i < 100; ++i) uv_run(&loop, UV_RUN_NOWAIT);
  CHECK(context->streams.size() == 2);  // not yet
  advance(1'500);
  PeerRead atVisitor;
  REQUIRE(readUntil(visitorPeer, atVisitor, [&] { return atVisitor.reset || atVisitor.eof; }));
  REQUIRE(readUntil(holderPeer, atHolder, [&] { return atHolder.reset || atHolder.eof; }));
  CHECK(atVisitor.reset);
  CHECK(atHolder.reset);
  REQUIRE(runUntil([&] { return context->streams.empty(); }));
}

TEST_CASE_FIXTURE(SpliceRig, "forward splice: half-closed past its timeout resets both sides") {
  start();
  ::shutdown(visitorPeer, SHUT_WR);
  PeerRead atHolder;
  REQUIRE(readUntil(holderPeer, atHolder, [&] { return atHolder.eof; }));
  advance(5'500);
  PeerRead atVisitor;
  REQUIRE(readUntil(visitorPeer, atVisitor, [&] { return atVisitor.reset; }));
  REQUIRE(runUntil([&] { return context->streams.empty(); }));
}

TEST_CASE_FIXTURE(SpliceRig, "forward splice: a reset on one side resets the other") {
  start();
  const linger abort{1, 0};
  ::setsockopt(holderPeer, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
  ::close(holderPeer);
  holderPeer = -1;
  PeerRead atVisitor;
  REQUIRE(readUntil(visitorPeer, atVisitor, [&] { return atVisitor.reset || atVisitor.eof; }));
  CHECK(atVisitor.reset);
  REQUIRE(runUntil([&] { return context->streams.empty(); }));
  CHECK(context->openConnections == 0);
}
