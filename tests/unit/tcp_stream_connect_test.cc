// TcpStream's client side (common/tcp_stream.h), as otunnel uses it for its relay connection and
// its local services: resolve + connect to a real loopback listener, a refused connect and a peer
// reset reported to the handler, reads cut to the handler's size limit, an abandoned connect that
// stays silent, and the context told of every open stream and every queued byte.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "common/tcp_stream.h"

namespace {

struct TestContext final : ot::TcpStreamContext {
  uv_loop_t* loop = nullptr;
  std::array<uint8_t, 4096> buffer{};
  int64_t buffered = 0;
  int open = 0;
  [[nodiscard]] uv_loop_t* streamLoop() const override { return loop; }
  [[nodiscard]] std::span<uint8_t> streamReadBuffer() override { return buffer; }
  [[nodiscard]] ot::WriteBacklogMarks writeBacklogMarks() const override {
    return ot::kNoWriteBacklog;
  }
  void addBuffered(int64_t delta) override { buffered += delta; }
  void onStreamOpened(ot::TcpStream&) override { ++open; }
  void onStreamClosed(ot::TcpStream&) override { --open; }
  void onWriteBacklogPaused() override {}
  void onWriteBacklogOverflow(const ot::TcpStream&, size_t) override {}
};

struct Recorder final : ot::TcpStream::Handler {
  bool connected = false;
  bool failed = false;
  ot::ConnectFailure failure;
  std::string read;
  std::vector<size_t> readSizes;
  int streamError = 0;
  bool eof = false;
  size_t written = 0;
  bool closed = false;
  size_t limit = SIZE_MAX;
  void onConnected() override { connected = true; }
  void onConnectFailed(const ot::ConnectFailure& f) override {
    failed = true;
    failure = f;
  }
  void onRead(std::span<const uint8_t> bytes) override {
    read.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    readSizes.push_back(bytes.size());
  }
  void onEof() override { eof = true; }
  void onStreamError(int status) override { streamError = status; }
  void onWritten(size_t bytes) override { written += bytes; }
  void onClosed() override { closed = true; }
  [[nodiscard]] size_t readSizeLimit() const override { return limit; }
};

// A listening socket on 127.0.0.1 (blocking accept), and its port.
struct Listener {
  int fd = -1;
  uint16_t port = 0;
  explicit Listener(bool listening = true) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port = ntohs(address.sin_port);
    if (listening) REQUIRE(::listen(fd, 4) == 0);
  }
  ~Listener() { ::close(fd); }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
};

struct Rig {
  uv_loop_t loop{};
  TestContext context;
  Recorder handler;
  ot::TcpStream* stream = nullptr;

  Rig() {
    REQUIRE(uv_loop_init(&loop) == 0);
    context.loop = &loop;
    stream = ot::TcpStream::open(context, &handler);
    REQUIRE(stream != nullptr);
    CHECK(context.open == 1);
  }
  ~Rig() {
    if (!handler.closed) {
      stream->close(false);
      while (!handler.closed) uv_run(&loop, UV_RUN_ONCE);
    }
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(context.open == 0);
    CHECK(context.buffered == 0);
    CHECK(uv_loop_close(&loop) == 0);
  }
  Rig(const Rig&) = delete;
  Rig& operator=(const Rig&) = delete;

  // Connects the stream to `listener` and answers the accepted peer's descriptor.
  int connectToLoopback(const Listener& listener) {
    stream->connect("127.0.0.1", listener.port);
    runUntil([&] { return handler.connected || handler.failed; });
    REQUIRE(handler.connected);
    const int peer = ::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC);
    REQUIRE(peer >= 0);
    return peer;
  }

  // Runs the loop until `done` or about 5 s passed.
  template <typename Done>
  void runUntil(Done done) {
    for (int i = 0; i < 5000 && !done(); ++i) {
      uv_run(&loop, UV_RUN_NOWAIT);
      if (!done()) usleep(1000);
    }
  }
};

}  // namespace

TEST_CASE_FIXTURE(Rig,
                  "tcp stream connect: resolves a .localhost name, connects, reads and writes") {
  Listener listener;
  stream->connect("relay.localhost", listener.port);
  runUntil([&] { return handler.connected || handler.failed; });
  REQUIRE(handler.connected);
  CHECK_FALSE(handler.failed);
  const int peer = ::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC);
  REQUIRE(peer >= 0);

  CHECK(stream->startReading() == 0);
  REQUIRE(::send(peer, "hello", 5, 0) == 5);
  runUntil([&] { return handler.read.size() >= 5; });
  CHECK(handler.read == "hello");

  stream->write({'o', 'k'});
  CHECK(context.buffered == static_cast<int64_t>(2 + ot::kWriteOverheadBytes));
  runUntil([&] { return handler.written == 2; });
  CHECK(stream->queuedBytes() == 0);
  std::array<char, 8> got{};
  REQUIRE(::recv(peer, got.data(), got.size(), 0) == 2);
  CHECK(std::string(got.data(), 2) == "ok");

  // The peer's FIN is an end, not an error.
  ::shutdown(peer, SHUT_WR);
  runUntil([&] { return handler.eof; });
  CHECK(handler.eof);
  CHECK(handler.streamError == 0);
  ::close(peer);
}

TEST_CASE_FIXTURE(Rig,
                  "tcp stream connect: a refused connect is reported with its stage and code") {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  {
    const Listener closed(false);  // bound, never listening: the port refuses
    port = closed.port;
  }
  stream->connect(host, port);
  runUntil([&] { return handler.connected || handler.failed; });
  REQUIRE(handler.failed);
  CHECK_FALSE(handler.connected);
  CHECK(handler.failure.stage == ot::ConnectFailure::Stage::kConnect);
  CHECK(handler.failure.status == UV_ECONNREFUSED);
}

TEST_CASE_FIXTURE(Rig, "tcp stream connect: a peer reset is a stream error") {
  Listener listener;
  const int peer = connectToLoopback(listener);
  CHECK(stream->startReading() == 0);
  const linger abortive{1, 0};
  ::setsockopt(peer, SOL_SOCKET, SO_LINGER, &abortive, sizeof abortive);
  ::close(peer);  // RST
  runUntil([&] { return handler.streamError != 0 || handler.eof; });
  CHECK(handler.streamError == UV_ECONNRESET);
  CHECK_FALSE(handler.eof);
  CHECK_FALSE(stream->reading());
}

TEST_CASE_FIXTURE(Rig, "tcp stream connect: reads are cut to the handler's size limit") {
  Listener listener;
  const int peer = connectToLoopback(listener);
  const std::string text(100, 'z');
  REQUIRE(::send(peer, text.data(), text.size(), 0) == 100);
  handler.limit = 30;
  CHECK(stream->startReading() == 0);
  runUntil([&] { return handler.read.size() >= 100; });
  CHECK(handler.read == text);
  REQUIRE(handler.readSizes.size() >= 4);
  for (const size_t size : handler.readSizes) CHECK(size <= 30);
  ::close(peer);
}

TEST_CASE_FIXTURE(Rig, "tcp stream connect: an abandoned connect reports nothing") {
  Listener listener;
  stream->connect("127.0.0.1", listener.port);
  stream->abandonConnect();
  for (int i = 0; i < 50; ++i) {
    uv_run(&loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
  CHECK_FALSE(handler.connected);
  CHECK_FALSE(handler.failed);
}
