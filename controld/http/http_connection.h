// One HTTP/1.1 connection of HttpServer (internal to it): reads and parses a request, hands it
// to the core for a worker, writes the response, then parses the next one. Loop thread only.
//
// States, one at a time:
//   kReading    parsing a request (reads on); deadline: headerTimeout from its first byte, or
//               idleTimeout after a response while no byte of the next one has come. A streamed
//               request (HttpServerOptions::streamRoutes) stays here while its body flows to the
//               worker: deadline idleTimeout from the last piece, none while reading is paused
//               because the worker is behind
//   kHandling   a worker runs the handler; reads off: pipelined requests wait in the kernel
//   kStreaming  a streamed response's chunks are being written as the worker makes them;
//               deadline idleTimeout from the last write that completed, while one is pending
//   kWriting    the response is being written; deadline idleTimeout (a peer that does not read)
//   kLingering  response sent with Connection: close, write side shut down; the peer's
//               leftovers are read and dropped until EOF or lingerTimeout
//   kClosing    uv_close called; the object is freed in the close callback
// The object embeds its stream handle (handle.data points back) and is freed only in the close
// callback; close() is idempotent.
#pragma once

#include <uv.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/http_parser.h"
#include "controld/api/api_types.h"
#include "controld/http/stream_exchange.h"

namespace ot::controld {

class HttpServerCore;

class HttpConnection {
 public:
  enum class State : uint8_t { kReading, kHandling, kStreaming, kWriting, kLingering, kClosing };

  // `peerAddress` is the client's IP for TCP, "" for a unix socket.
  HttpConnection(HttpServerCore& core, uint64_t id, bool trustClientAddress,
                 std::string peerAddress);
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Wraps the accepted descriptor (which it then owns) and starts reading. On failure the
  // connection is already closing (and the descriptor closed); the caller just forgets it.
  [[nodiscard]] bool open(uv_loop_t* loop, int fd, bool tcp);
  void close();

  // A worker's response for the request in kHandling.
  void onResponse(ApiResponse response);
  // The streamed exchange has news (a response, chunks, room for more body).
  void onStreamEvent();
  // The periodic timeout check: whether the core should close this connection now.
  [[nodiscard]] bool expired(uint64_t now, bool draining) const;

  [[nodiscard]] uint64_t id() const { return id_; }
  [[nodiscard]] State state() const { return state_; }

 private:
  struct WriteRequest;
  union StreamHandle {
    uv_tcp_t tcp;
    uv_pipe_t pipe;
  };

  static void onAlloc(uv_handle_t* handle, size_t suggested, uv_buf_t* buf);
  static void onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf);
  static void onWrite(uv_write_t* req, int status);
  static void onShutdown(uv_shutdown_t* req, int status);
  static void onClosed(uv_handle_t* handle);

  [[nodiscard]] uv_stream_t* stream();
  [[nodiscard]] uv_handle_t* handle();
  void startReading();
  void stopReading();
  void consume(std::span<const uint8_t> input);
  void maybeContinue();
  // The request's head as a handler sees it, without the body; false (after answering 400) when
  // it repeats the client address header.
  bool buildRequest(const HttpMessage& message, ApiRequest& request);
  bool onHead();
  bool onBody(std::span<const uint8_t> piece);
  void onMessageDone();
  void dispatch(bool mustClose);
  void respondError(HttpError error);
  void respond(ApiResponse response);
  [[nodiscard]] std::vector<HttpHeader> responseHeaders(
      std::vector<std::pair<std::string, std::string>> given, bool closing) const;
  void write(std::string data, bool final, size_t streamed = 0);
  void onResponseWritten();
  void startLingering();

  HttpServerCore& core_;
  const uint64_t id_;
  const bool trustClientAddress_;
  const std::string peerAddress_;
  StreamHandle handle_{};
  bool tcp_ = true;
  State state_ = State::kReading;
  bool reading_ = false;
  bool messageStarted_ = true;  // waiting for the first request counts as reading it
  bool continueSent_ = false;
  bool keepAlive_ = false;    // of the request being answered
  bool http10_ = false;       // of the request being answered
  bool headRequest_ = false;  // of the request being answered
  bool closeAfterWrite_ = false;
  uint64_t deadline_ = 0;  // loop time (ms)
  HttpParser parser_;
  std::string pending_;  // bytes read past the request being handled (pipelining)
  std::string body_;     // an ordinary request's body, collected
  // A streamed request's exchange with its worker (null otherwise); streamIn_ while its body
  // still goes there.
  std::shared_ptr<StreamExchange> exchange_;
  bool streamIn_ = false;
  size_t writesInFlight_ = 0;
  uv_shutdown_t shutdown_{};
};

}  // namespace ot::controld
