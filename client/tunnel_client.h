// otunnel's process once the tunnel is provisioned: one libuv loop with the bridge pool, the
// signal handling and the hourly certificate check. Its members are declared in start-up order
// (the loop, the handles that stop it, the pool, the certificate watcher) and are destroyed in the
// reverse order, which is the shutdown order: the watcher joins its thread, the pool's handles are
// already closed by then, and the loop is closed last. main() parses the flags, provisions, builds
// one and calls run() on the main thread, which becomes the loop thread.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>

#include "client/api_client.h"
#include "client/command_line.h"
#include "client/provision.h"

namespace ot::client {

class Dialer;
class CertificateWatcher;
class OriginReloader;
class StatusReporter;
class StatusWriter;
struct PoolStatus;

class TunnelClient {
 public:
  TunnelClient(const CommandLine& line, ApiClientOptions apiOptions, Provisioned provisioned);
  ~TunnelClient();
  TunnelClient(const TunnelClient&) = delete;
  TunnelClient& operator=(const TunnelClient&) = delete;

  // Serves until SIGINT/SIGTERM or a fatal answer from the relay; returns the exit status.
  // `onStarted` runs once the signal handlers are in place (whoever reads the URL may stop
  // otunnel at once). 1 without running when the loop could not be created.
  [[nodiscard]] int run(const std::function<void()>& onStarted);

 private:
  // The loop, closed when the object goes (after every handle on it is closed).
  class Loop {
   public:
    Loop();
    ~Loop();
    Loop(const Loop&) = delete;
    Loop& operator=(const Loop&) = delete;
    [[nodiscard]] uv_loop_t* get() { return &loop_; }
    [[nodiscard]] int initError() const { return initError_; }

   private:
    uv_loop_t loop_{};
    int initError_ = 0;
  };

  void onStatus(const PoolStatus& status);
  static void onSignal(uv_signal_t* handle, int signum);
  // Stops on a fresh stack: the pool may be reporting from deep inside one of its callbacks.
  void requestStop(int code);
  static void onStopTimer(uv_timer_t* handle);

  Loop loop_;
  uv_signal_t sigint_{};
  uv_signal_t sigterm_{};
  uv_timer_t stopTimer_{};
  std::unique_ptr<Dialer> pool_;
  std::unique_ptr<StatusWriter> statusWriter_;
  std::unique_ptr<StatusReporter> statusReporter_;  // `status` reports to the relay
  std::unique_ptr<CertificateWatcher> watcher_;     // null for a credential origin
  std::unique_ptr<OriginReloader> reloader_;        // only for a credential origin
  bool stopping_ = false;
  int exitCode_ = 0;
  std::string lastKey_;
  int lastAttached_ = 0;  // links attached at the last status: a rise resends the relay report
};

}  // namespace ot::client
