// relayd's TLS handshake workers: the API domain's handshake steps (the ClientHello's key exchange,
// the certificate's signature or the ticket's opening, the Finished check) run on a few threads of
// their own while the loop keeps the sockets, the records and everything else. A reconnect storm
// is mostly handshakes (docs/capacity.md, "Handshakes on worker threads"): on one loop thread they
// were bound to one core.
//
// A step is a TlsEngine::handshake() call on an engine the loop does not touch until the step is
// back (tls::TlsStream holds the bytes that arrive meanwhile). The queue is bounded by the
// handshake slots (at most HANDSHAKE_CONCURRENCY handshakes in progress, one step each). Steps
// come back through a uv_async handle, in the order they finished. What the handshake's callbacks
// share with the loop is safe from a worker: the ticket key store locks, ALPN preferences and
// contexts are read-only, the keylog hook writes into the step's own engine.
//
// Loop thread, except the workers' own loop. submit() takes a lock for a push (no wait beyond
// another thread's push or pop).
#pragma once

#include <uv.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/tls_stream.h"

namespace ot::relayd {

class RelayMetrics;

// How many workers TLS_HANDSHAKE_THREADS = `configured` means on a machine where this process may
// run on `cores` CPUs: `configured` when given (>= 0); "auto" (-1) is two less than the cores, at
// most 8 (0 on one or two cores: the loop does its own handshakes).
[[nodiscard]] size_t handshakeWorkerCount(int64_t configured, size_t cores);
// The CPUs this process may run on (its affinity mask), at least 1.
[[nodiscard]] size_t usableCores();

class HandshakeWorkers final : public tls::HandshakeRunner {
 public:
  // `threads` >= 1 workers; null with `error` set when a thread cannot be started.
  [[nodiscard]] static std::unique_ptr<HandshakeWorkers> create(uv_loop_t* loop, size_t threads,
                                                                RelayMetrics* metrics,
                                                                std::string& error);
  ~HandshakeWorkers();
  HandshakeWorkers(const HandshakeWorkers&) = delete;
  HandshakeWorkers& operator=(const HandshakeWorkers&) = delete;

  // HandshakeRunner. After close() a step runs at once on the caller's thread.
  void submit(std::unique_ptr<Job> job) override;

  // Shutdown, before the loop's last run: the workers finish the step they are in and stop; steps
  // not delivered are dropped (their streams are closing: the engines go with the streams) and the
  // async handle closes.
  void closeHandles();

  [[nodiscard]] size_t threads() const { return threads_.size(); }
  // Steps submitted and not yet delivered.
  [[nodiscard]] size_t outstanding() const { return outstanding_; }

 private:
  HandshakeWorkers(uv_loop_t* loop, RelayMetrics* metrics);
  void work();
  void stopThreads();
  static void onAsync(uv_async_t* handle);
  void deliver();

  uv_loop_t* loop_;
  RelayMetrics* metrics_;
  uv_async_t async_{};
  bool closed_ = false;
  size_t outstanding_ = 0;  // loop thread
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Job>> queued_;  // guarded by mutex_
  std::vector<std::unique_ptr<Job>> done_;   // guarded by mutex_
  bool stopping_ = false;                    // guarded by mutex_
  std::vector<std::thread> threads_;
};

}  // namespace ot::relayd
