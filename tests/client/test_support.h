// Test scaffolding for otunnel's data plane: a private loop that can be run until a condition
// holds (with an overall deadline, no sleeps), a throwaway PKI (a CA file for the client, a
// relay certificate, a tunnel certificate), and a local TCP service (echo or a byte source).
// Header-only so any tests/client/*_test.cc can include it; single-threaded, loop thread only.
#pragma once

#include <doctest/doctest.h>
#include <unistd.h>
#include <uv.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/bridge_pool.h"
#include "tests/unit/test_certs.h"

namespace ot::client_test {

using client::BridgeConfig;
using client::BridgePool;
using client::LocalTarget;
using client::PoolStatus;

// --- The loop ---------------------------------------------------------------------------------

class TestLoop {
 public:
  TestLoop() {
    uv_loop_init(&loop_);
    // A ticking timer so that UV_RUN_ONCE always returns and deadlines are checked.
    uv_timer_init(&loop_, &tick_);
    uv_timer_start(
        &tick_, [](uv_timer_t*) {}, 10, 10);
  }
  ~TestLoop() {
    uv_close(reinterpret_cast<uv_handle_t*>(&tick_), nullptr);
    // Anything a test left open is a leak: count it, close it so the loop can be freed.
    int leftovers = 0;
    uv_walk(
        &loop_,
        [](uv_handle_t* handle, void* arg) {
          if (uv_is_closing(handle) == 0) {
            ++*static_cast<int*>(arg);
            uv_close(handle, nullptr);
          }
        },
        &leftovers);
    uv_run(&loop_, UV_RUN_DEFAULT);
    CHECK_MESSAGE(leftovers == 0, "handles left open by the test");
    CHECK(uv_loop_close(&loop_) == 0);
  }
  TestLoop(const TestLoop&) = delete;
  TestLoop& operator=(const TestLoop&) = delete;

  uv_loop_t* get() { return &loop_; }
  uint64_t now() { return uv_now(&loop_); }

  // Runs the loop until `done()` holds; false if `timeoutMs` passed first.
  bool runUntil(const std::function<bool()>& done, uint64_t timeoutMs = 10'000) {
    uv_update_time(&loop_);
    const uint64_t deadline = uv_now(&loop_) + timeoutMs;
    while (!done()) {
      if (uv_now(&loop_) >= deadline) return false;
      uv_run(&loop_, UV_RUN_ONCE);
    }
    return true;
  }
  // Handles other than the loop's own ticker, closing ones included.
  int handleCount() {
    std::pair<int, uv_handle_t*> state{0, reinterpret_cast<uv_handle_t*>(&tick_)};
    uv_walk(
        &loop_,
        [](uv_handle_t* handle, void* arg) {
          auto* counting = static_cast<std::pair<int, uv_handle_t*>*>(arg);
          if (handle != counting->second) ++counting->first;
        },
        &state);
    return state.first;
  }

  // Runs the loop for `ms` (to show that something does NOT happen within that time).
  void runFor(uint64_t ms) {
    uv_update_time(&loop_);
    const uint64_t until = uv_now(&loop_) + ms;
    runUntil([&] { return uv_now(&loop_) >= until; }, ms + 1000);
  }

 private:
  uv_loop_t loop_{};
  uv_timer_t tick_{};
};

// --- PKI --------------------------------------------------------------------------------------

inline constexpr const char* kRelayName = "relay.localhost";      // the API domain in tests
inline constexpr const char* kTunnelName = "t1.opentunnel.test";  // the visitor's hostname

struct TestPki {
  test::TestCert ca = test::makeCa("OpenTunnel Client Test CA");
  test::TestCert relay = test::makeLeaf(ca, kRelayName, 2);
  test::TestCert tunnel = test::makeLeaf(ca, kTunnelName, 3);
  test::CaFile caFile{ca, "client-test"};

  [[nodiscard]] std::string relayChain() const { return relay.certPem + ca.certPem; }
  [[nodiscard]] std::string tunnelChain() const { return tunnel.certPem + ca.certPem; }
};

inline const TestPki& pki() {
  static const TestPki instance;
  return instance;
}

// --- A local service --------------------------------------------------------------------------

// A TCP server on 127.0.0.1:0. kEcho writes back what it reads and half-closes after the peer
// did; kSource writes `source` on accept, then half-closes; kSink only reads.
class LocalServer {
 public:
  enum class Mode { kEcho, kSource, kSink };

  struct Conn {
    uv_tcp_t tcp{};
    LocalServer* server = nullptr;
    std::string received;
    bool eof = false;
    int error = 0;  // the read error, e.g. UV_ECONNRESET after an RST
    bool closed = false;
    bool shutdown = false;
  };

  LocalServer(uv_loop_t* loop, Mode mode, std::string source = {})
      : loop_(loop), mode_(mode), source_(std::move(source)) {
    uv_tcp_init(loop_, &listener_);
    listener_.data = this;
    ++openHandles_;
    sockaddr_in addr{};
    uv_ip4_addr("127.0.0.1", 0, &addr);
    REQUIRE(uv_tcp_bind(&listener_, reinterpret_cast<const sockaddr*>(&addr), 0) == 0);
    REQUIRE(uv_listen(reinterpret_cast<uv_stream_t*>(&listener_), 64, &onConnection) == 0);
    sockaddr_storage bound{};
    int len = sizeof bound;
    uv_tcp_getsockname(&listener_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  // Waits (running the loop) until its handles are closed, so none outlives its memory.
  ~LocalServer() {
    close();
    while (openHandles_ > 0) uv_run(loop_, UV_RUN_ONCE);
  }
  LocalServer(const LocalServer&) = delete;
  LocalServer& operator=(const LocalServer&) = delete;

  [[nodiscard]] uint16_t port() const { return port_; }
  [[nodiscard]] const std::vector<std::unique_ptr<Conn>>& conns() const { return conns_; }

  // Stops reading on every connection: the kernel buffers fill, then the peer's writes stall.
  void pauseReading() {
    paused_ = true;
    for (auto& conn : conns_) {
      if (!conn->closed) uv_read_stop(reinterpret_cast<uv_stream_t*>(&conn->tcp));
    }
  }
  // Aborts connection `i` with an RST.
  void resetConn(size_t i) {
    Conn& conn = *conns_.at(i);
    if (conn.closed) return;
    conn.closed = true;
    uv_tcp_close_reset(&conn.tcp, [](uv_handle_t* handle) {
      --static_cast<Conn*>(handle->data)->server->openHandles_;
    });
  }

  // Closes the listener and every connection (their objects stay until the server goes).
  void close() {
    if (!uv_is_closing(reinterpret_cast<uv_handle_t*>(&listener_))) {
      uv_close(reinterpret_cast<uv_handle_t*>(&listener_), [](uv_handle_t* handle) {
        --static_cast<LocalServer*>(handle->data)->openHandles_;
      });
    }
    for (auto& conn : conns_) closeConn(*conn);
  }

 private:
  struct Write {
    uv_write_t req{};
    std::string data;
  };

  static void onConnection(uv_stream_t* listener, int status) {
    auto* self = static_cast<LocalServer*>(listener->data);
    if (status != 0) return;
    auto conn = std::make_unique<Conn>();
    conn->server = self;
    uv_tcp_init(self->loop_, &conn->tcp);
    conn->tcp.data = conn.get();
    ++self->openHandles_;
    if (uv_accept(listener, reinterpret_cast<uv_stream_t*>(&conn->tcp)) != 0) {
      closeConn(*conn);
      self->conns_.push_back(std::move(conn));
      return;
    }
    Conn& c = *conn;
    self->conns_.push_back(std::move(conn));
    if (self->paused_) return;
    uv_read_start(
        reinterpret_cast<uv_stream_t*>(&c.tcp),
        [](uv_handle_t*, size_t suggested, uv_buf_t* buf) {
          buf->base = new char[suggested];
          buf->len = suggested;
        },
        &onRead);
    if (self->mode_ == Mode::kSource) {
      write(c, self->source_);
      shutdownConn(c);
    }
  }

  static void onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
    auto* conn = static_cast<Conn*>(stream->data);
    std::unique_ptr<char[]> owned(buf->base);
    if (nread == 0 || conn->closed) return;
    if (nread == UV_EOF) {
      conn->eof = true;
      if (conn->server->mode_ == Mode::kEcho) shutdownConn(*conn);
      if (conn->shutdown) closeConn(*conn);
      return;
    }
    if (nread < 0) {
      conn->error = static_cast<int>(nread);
      closeConn(*conn);
      return;
    }
    const std::string chunk(buf->base, static_cast<size_t>(nread));
    conn->received += chunk;
    if (conn->server->mode_ == Mode::kEcho) write(*conn, chunk);
  }

  static void write(Conn& conn, const std::string& data) {
    auto* w = new Write;
    w->data = data;
    w->req.data = w;
    const uv_buf_t buf = uv_buf_init(w->data.data(), static_cast<unsigned>(w->data.size()));
    if (uv_write(&w->req, reinterpret_cast<uv_stream_t*>(&conn.tcp), &buf, 1,
                 [](uv_write_t* req, int) { delete static_cast<Write*>(req->data); }) != 0) {
      delete w;
    }
  }

  static void shutdownConn(Conn& conn) {
    if (conn.shutdown || conn.closed) return;
    conn.shutdown = true;
    auto* req = new uv_shutdown_t;
    req->data = &conn;
    if (uv_shutdown(req, reinterpret_cast<uv_stream_t*>(&conn.tcp),
                    [](uv_shutdown_t* r, int) { delete r; }) != 0) {
      delete req;
    }
  }

  static void closeConn(Conn& conn) {
    if (conn.closed) return;
    conn.closed = true;
    uv_close(reinterpret_cast<uv_handle_t*>(&conn.tcp),
             [](uv_handle_t* handle) { --static_cast<Conn*>(handle->data)->server->openHandles_; });
  }

  uv_loop_t* loop_;
  Mode mode_;
  std::string source_;
  uv_tcp_t listener_{};
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<Conn>> conns_;
  int openHandles_ = 0;
  bool paused_ = false;
};

// A port on 127.0.0.1 where nothing listens (bound, then released).
inline uint16_t unusedPort(uv_loop_t* loop, const char* ip = "127.0.0.1") {
  uv_tcp_t tcp;
  uv_tcp_init(loop, &tcp);
  sockaddr_in addr{};
  uv_ip4_addr(ip, 0, &addr);
  uv_tcp_bind(&tcp, reinterpret_cast<const sockaddr*>(&addr), 0);
  sockaddr_storage bound{};
  int len = sizeof bound;
  uv_tcp_getsockname(&tcp, reinterpret_cast<sockaddr*>(&bound), &len);
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp), nullptr);
  uv_run(loop, UV_RUN_NOWAIT);
  return ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

// --- The pool under test ----------------------------------------------------------------------

inline BridgeConfig testConfig(uint16_t relayPort, uint16_t localPort, bool terminateTls) {
  BridgeConfig config;
  config.relayHost = kRelayName;
  config.relayPort = relayPort;
  config.domain = kRelayName;
  config.caFile = pki().caFile.string();
  config.tunnelId = "t1";
  config.token = "tk_test_token";
  config.routes[""] = LocalTarget{"127.0.0.1", localPort};
  config.terminateTls = terminateTls;
  if (terminateTls) {
    config.certificateChainPem = pki().tunnelChain();
    config.privateKeyPem = pki().tunnel.keyPem;
  }
  config.links = 1;
  config.window = 65536;
  return config;
}

// A pool with its status reports recorded, stopped (and checked stopped) at the end.
class PoolUnderTest {
 public:
  PoolUnderTest(TestLoop& loop, BridgeConfig config)
      : loop_(loop),
        pool_(std::make_unique<BridgePool>(loop.get(), std::move(config),
                                           [this](const PoolStatus& status) {
                                             last = status;
                                             ++reports;
                                           })) {}
  ~PoolUnderTest() { stop(); }
  PoolUnderTest(const PoolUnderTest&) = delete;
  PoolUnderTest& operator=(const PoolUnderTest&) = delete;

  BridgePool& operator*() { return *pool_; }
  BridgePool* operator->() { return pool_.get(); }

  void stop() {
    if (!pool_ || stopped_) return;
    bool done = false;
    pool_->stop([&done] { done = true; });
    CHECK(loop_.runUntil([&] { return done; }, 8'000));
    stopped_ = true;
    pool_.reset();
  }

  PoolStatus last;
  int reports = 0;

 private:
  TestLoop& loop_;
  std::unique_ptr<BridgePool> pool_;
  bool stopped_ = false;
};

}  // namespace ot::client_test
