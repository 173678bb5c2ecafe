// One request and one response on the internal port, on the mesh loop (route checks,
// docs/mesh.md "Route checks"): the answering side adopts a connection relayd handed over (with
// the bytes relayd already read), the asking side dials a peer's internal address from this
// machine's internal IP (route checks, and the liveness question of alive_asker.*). Each reads
// until its `parse` says the message is whole or invalid, at most `maxBytes`, within `timeoutMs`
// from the start (connect included); then `done` runs once with the bytes (nullopt: refused,
// closed, timed out, over the limit, or an I/O error; end() says which). The answering side replies
// with respond(), which writes and closes.
//
// Owned by an InternalExchanges set (one per mesh node) that closes whatever is still open when
// the node stops; an exchange frees itself once its handle has closed. Loop thread only.
#pragma once

#include <uv.h>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>

#include "controld/mesh/route_check_http.h"

namespace ot::mesh {

class InternalExchanges;

// How an exchange ended, for `done`: kComplete with the bytes, else why there are none.
enum class ExchangeEnd : uint8_t { kComplete, kRefused, kClosed, kTimeout, kTooLarge };

class InternalExchange {
 public:
  using Parse = std::function<HttpParse(std::string_view bytes)>;
  using Done = std::function<void(InternalExchange& exchange, std::optional<std::string> bytes)>;

  // Writes `bytes` and closes once they are out (or at once on an error). Answering side only.
  void respond(std::string bytes);
  void close();
  // close() without `done` (the asker no longer wants the answer).
  void cancel();
  [[nodiscard]] ExchangeEnd end() const { return end_; }

 private:
  friend class InternalExchanges;
  InternalExchange(InternalExchanges& owner, uv_loop_t* loop, size_t maxBytes, Parse parse,
                   Done done);
  ~InternalExchange() = default;
  bool startTimer(uint64_t timeoutMs);
  void startReading();
  void received(std::string_view bytes);
  void finish(std::optional<std::string> bytes);
  void fail(ExchangeEnd end);  // finish(nullopt) for `end`, then close()
  static void onConnect(uv_connect_t* request, int status);
  static void onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf);
  static void onTimeout(uv_timer_t* timer);
  [[nodiscard]] uv_stream_t* stream() { return reinterpret_cast<uv_stream_t*>(&tcp_); }

  InternalExchanges& owner_;
  uv_loop_t* loop_;
  uv_tcp_t tcp_{};
  uv_timer_t timer_{};
  uv_connect_t connect_{};
  uv_write_t write_{};
  size_t maxBytes_;
  Parse parse_;
  Done done_;
  std::string buffer_;
  std::string request_;   // the asking side's request, written once connected
  std::string response_;  // kept alive until written
  std::array<char, 4096> readBuffer_{};
  int openHandles_ = 0;
  ExchangeEnd end_ = ExchangeEnd::kClosed;
  bool finished_ = false;
  bool closing_ = false;
};

class InternalExchanges {
 public:
  explicit InternalExchanges(uv_loop_t* loop) : loop_(loop) {}
  ~InternalExchanges();
  InternalExchanges(const InternalExchanges&) = delete;
  InternalExchanges& operator=(const InternalExchanges&) = delete;

  // The answering side: takes `fd` (closed on failure), feeds `prefix` first.
  void adopt(int fd, std::span<const uint8_t> prefix, size_t maxBytes, uint64_t timeoutMs,
             InternalExchange::Parse parse, InternalExchange::Done done);
  // The asking side: binds `source`, connects to `target`, writes `request`. The exchange, or
  // nullptr when it already ended (`done` ran, kRefused) inside this call.
  InternalExchange* dial(const sockaddr_storage& source, const sockaddr_storage& target,
                         std::string request, size_t maxBytes, uint64_t timeoutMs,
                         InternalExchange::Parse parse, InternalExchange::Done done);
  // Closes every open exchange (their `done` runs with nullopt if it has not run yet).
  void closeAll();
  [[nodiscard]] size_t size() const { return open_.size(); }

 private:
  friend class InternalExchange;
  void released(InternalExchange* exchange);

  uv_loop_t* loop_;
  std::unordered_set<InternalExchange*> open_;
};

}  // namespace ot::mesh
