// controld's HTTP/1.1 server: the API (a unix socket that only relayd reaches, plus a TCP listener
// in development) and the /metrics listener are each one HttpServer. It owns a libuv loop on its
// own thread that accepts, parses (common/http_parser.h) and writes; every request goes to the one
// ApiHandler given at construction, which runs on a WorkerPool thread (handlers block on storage)
// and its response comes back to the loop to be sent. The server answers by itself only what
// never reaches a handler: malformed or oversized requests (400, 413, 414, 431, 505), a full
// worker queue (503) and a handler that threw (500), all with the API's JSON error shape.
//
// Per connection: one request at a time (pipelined requests wait, unread, in the socket: that is
// the backpressure), keep-alive, a 10 s limit to receive a request and a 60 s idle limit between
// requests. The process must not die of SIGPIPE: start() ignores it, as libuv writes with write(2).
//
// Threads: construct, start(), stop() and destroy on one owner thread; setDraining() from any.
// The WorkerPool and the Metrics (if any) must outlive the server. The handler is called
// concurrently from the pool's threads, possibly after stop() returned for requests already
// queued (their responses are then dropped), so it must not depend on the server.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

#include "common/config.h"
#include "common/http_parser.h"
#include "common/metrics.h"
#include "common/result.h"
#include "controld/api/api_types.h"
#include "controld/http/stream_exchange.h"
#include "controld/http/worker_pool.h"

namespace ot::controld {

class HttpServerCore;

inline constexpr uint64_t kApiMaxBodyBytes = 64 * 1024;

// The parser's default limits with the API's 64 KiB body limit.
[[nodiscard]] inline HttpParserLimits apiParserLimits() {
  HttpParserLimits limits;
  limits.maxBodyBytes = kApiMaxBodyBytes;
  return limits;
}

struct HttpListenerConfig {
  config::ListenAddress address;
  // Whether kClientAddressHeader names the client. When false the header is removed from the
  // request and client_address is the peer's IP ("" on a unix socket). When true its value is
  // the client_address (the peer's IP if it is absent) and a repeated header is a 400.
  bool trustClientAddressHeader = false;

  // The API's rule: trusted on a unix socket (only relayd can reach it), never on TCP.
  [[nodiscard]] static HttpListenerConfig forApi(config::ListenAddress address) {
    const bool trusted = address.kind == config::ListenAddress::Kind::kUnix;
    return {std::move(address), trusted};
  }
};

struct HttpServerOptions {
  std::string name = "api";      // log lines and the metrics' `server` label: a fixed word
  size_t maxConnections = 4096;  // beyond it a new connection is accepted and closed at once
  HttpParserLimits limits = apiParserLimits();  // bodyMode is ignored: bodies are collected
  // From a request's first byte (or from accept) until the whole request, body included, arrived.
  std::chrono::milliseconds headerTimeout{10'000};
  // Between a response and the next request's first byte.
  std::chrono::milliseconds idleTimeout{60'000};
  // After a response with Connection: close, how long the peer's leftovers are read and dropped
  // (so the close does not reset the connection before the peer read the response).
  std::chrono::milliseconds lingerTimeout{2'000};
  // How long accepting stops after accept() failed for lack of descriptors (or memory).
  std::chrono::milliseconds acceptPause{500};
  int backlog = 16384;
  // stop(): 0 closes every connection at once. Otherwise the listeners close at once, connections
  // between requests close, and a request already read or being answered gets up to this long
  // to be answered (Connection: close) before the rest is cut.
  std::chrono::milliseconds stopGrace{0};
  // Requests whose body or response stream (StreamExchange): chosen by their head, run on the
  // pool, at most maxStreams at once (more answer 503). Their body is not limited by
  // limits.maxBodyBytes: the handler reads it in pieces under backpressure instead.
  StreamRoutes streamRoutes;
  size_t maxStreams = 2;
  // Optional: <prefix>_http_requests_total{server,status_class},
  // <prefix>_http_connections_open{server}, <prefix>_http_connections_rejected_total{server} and
  // <prefix>_accept_errors_total{server,error}.
  metrics::Metrics* metrics = nullptr;
};

class HttpServer {
 public:
  HttpServer(WorkerPool& pool, ApiHandler handler, HttpServerOptions options = {});
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds every listener (all or none: on an error nothing stays bound) and starts the loop
  // thread. Once per server.
  [[nodiscard]] Status start(std::span<const HttpListenerConfig> listeners);

  // Closes the listeners and every connection at once (requests in progress get no answer),
  // removes the unix socket files and joins the loop thread. Idempotent; returns promptly even
  // while handlers are still running.
  void stop();

  // While draining, every response carries Connection: close and connections waiting between
  // requests are closed, so clients move to another instance. Any thread.
  void setDraining(bool draining);

  // The port bound by the index-th listener given to start() (0 for a unix socket): the one
  // picked when it asked for port 0.
  [[nodiscard]] uint16_t boundPort(size_t listener = 0) const;

 private:
  std::unique_ptr<HttpServerCore> core_;
};

}  // namespace ot::controld
