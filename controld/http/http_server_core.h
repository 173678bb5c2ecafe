// The loop side of HttpServer (internal to it): the libuv loop and its thread, the listeners and
// the accept path, the connection table, the timeout sweep, and the hand-off of requests to the
// WorkerPool and of responses back to the loop. HttpConnection (http_connection.h) does the
// per-connection HTTP work and calls back into this class.
//
// Ownership: the core owns the loop and every handle on it. Connections are heap objects
// embedding their handle, freed only in their close callbacks; the table below holds them while
// they are open. Each listener's accept path is a net::AcceptLoop (shared with relayd). Worker
// tasks hold the shared Dispatch (handler + response mailbox), never the core, so a task finishing
// late cannot touch a stopped server.
#pragma once

#include <sys/socket.h>
#include <uv.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/accept_loop.h"
#include "common/listen_socket.h"
#include "common/log.h"
#include "common/log_throttle.h"
#include "controld/http/http_server.h"
#include "controld/http/stream_exchange.h"

namespace ot::controld {

class HttpConnection;

// Responses finished on worker threads, waiting for the loop. post() may run on any thread;
// take() and close() on the loop thread. Once closed (the loop is stopping) posts are dropped.
class ResponseMailbox {
 public:
  struct Completion {
    uint64_t connection = 0;
    ApiResponse response;
  };

  explicit ResponseMailbox(uv_async_t* async) : async_(async) {}

  void post(Completion completion);
  void wake();
  [[nodiscard]] std::vector<Completion> take();
  // A streamed exchange of this connection has news (StreamExchange's poke).
  void poke(uint64_t connection);
  [[nodiscard]] std::vector<uint64_t> takePokes();
  void close();

 private:
  std::mutex mutex_;
  uv_async_t* async_;  // uv_async_send is the one libuv call other threads may make
  bool closed_ = false;
  std::vector<Completion> items_;
  std::vector<uint64_t> pokes_;
};

class HttpServerCore {
 public:
  HttpServerCore(WorkerPool& pool, ApiHandler handler, HttpServerOptions options);
  ~HttpServerCore();
  HttpServerCore(const HttpServerCore&) = delete;
  HttpServerCore& operator=(const HttpServerCore&) = delete;

  // Owner thread (see HttpServer).
  [[nodiscard]] Status start(std::span<const HttpListenerConfig> listeners);
  void stop();
  void setDraining(bool draining);
  [[nodiscard]] uint16_t boundPort(size_t listener) const;

  // Loop thread, for HttpConnection.
  [[nodiscard]] const HttpServerOptions& options() const { return options_; }
  [[nodiscard]] const log::Logger& log() const { return log_; }
  [[nodiscard]] uint64_t now() const { return uv_now(&loop_); }
  [[nodiscard]] bool draining() const { return draining_.load(std::memory_order_relaxed); }
  // One buffer for every read on the loop: a read callback consumes it before returning, so an
  // idle connection holds no buffer.
  [[nodiscard]] uv_buf_t readBuffer();
  // Runs the handler on the pool; false when the pool's queue is full.
  [[nodiscard]] bool submit(uint64_t connection, ApiRequest request);
  // The stream handler for a request's head, or an empty one (HttpServerOptions::streamRoutes).
  [[nodiscard]] StreamHandler streamHandler(const ApiRequest& head) const;
  // Runs a stream handler on the pool with a new exchange; null when the pool's queue is full or
  // HttpServerOptions::maxStreams exchanges run already.
  [[nodiscard]] std::shared_ptr<StreamExchange> submitStream(uint64_t connection, ApiRequest head,
                                                             StreamHandler handler);
  void countResponse(int status);
  // The connection is closing: it leaves the table (its memory goes in its close callback).
  void forget(uint64_t connection);

 private:
  struct Dispatch;
  struct Listener {
    std::unique_ptr<net::AcceptLoop> accept;
    bool isUnix = false;
    bool trustClientAddress = false;
  };

  void closeAll();
  void beginStop();
  void onWake();
  void onAccept(const Listener& listener, int fd, const sockaddr_storage& peer);
  void onAcceptError(const net::AcceptFailure& failure);
  void sweep();
  void acceptConnection(const Listener& listener, int fd, const sockaddr_storage& peer);

  WorkerPool& pool_;
  HttpServerOptions options_;
  log::Logger log_{"controld.http"};
  std::shared_ptr<Dispatch> dispatch_;

  uv_loop_t loop_{};
  uv_async_t wake_{};        // responses posted, or stop requested
  uv_timer_t sweepTimer_{};  // timeouts of every connection, one timer for all
  std::thread thread_;
  bool started_ = false;  // owner thread
  bool joined_ = false;   // owner thread
  std::vector<uint16_t> boundPorts_;
  std::atomic<bool> stopRequested_{false};
  std::atomic<bool> draining_{false};

  // Loop thread only.
  bool closing_ = false;
  bool stopping_ = false;      // stop() with a grace: listeners closed, waiting for answers
  uint64_t stopDeadline_ = 0;  // uv_now at which the grace ends
  std::vector<std::unique_ptr<Listener>> listeners_;
  std::unordered_map<uint64_t, HttpConnection*> connections_;  // owned, see above
  uint64_t nextConnectionId_ = 1;
  std::vector<char> readBuffer_;
  LogThrottle acceptLogThrottle_{10'000};  // accept failures: a line per 10 s at most

  // Metrics (all null without HttpServerOptions::metrics).
  std::array<prometheus::Counter*, 4> requests_{};  // by status class, 2xx..5xx
  prometheus::Gauge* connectionsOpen_ = nullptr;
  prometheus::Counter* connectionsRejected_ = nullptr;
  prometheus::Counter* acceptErrorsEmfile_ = nullptr;
  prometheus::Counter* acceptErrorsOther_ = nullptr;
};

}  // namespace ot::controld
