// relayd's process: the loop, its listeners (TLS, HTTP redirect, metrics), the Relay, the signal
// handling and the shutdown sequence of docs/architecture.md (SIGTERM: drain for
// SHUTDOWN_DRAIN_MS while still serving, then stop listening, close what is left, exit).
// main() builds one and calls run() on the main thread, which becomes the loop thread.
#pragma once

#include <uv.h>

#include <memory>

#include "common/metrics.h"
#include "relayd/relayd_config.h"

namespace ot::relayd {

class RelayServer {
 public:
  explicit RelayServer(RelaydConfig config);
  ~RelayServer();
  RelayServer(const RelayServer&) = delete;
  RelayServer& operator=(const RelayServer&) = delete;

  // Serves until SIGTERM/SIGINT has been handled; returns the exit status.
  [[nodiscard]] int run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ot::relayd
