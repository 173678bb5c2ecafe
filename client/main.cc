// otunnel: the tunnel client (the origin half). main only wires things: the command line, the
// provisioning (blocking, before the loop), then one libuv loop with the bridge pool, signals and
// the certificate watcher. stdout gets exactly one line, the tunnel's URL; everything else goes
// to stderr.
#include <uv.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <variant>

#include "client/api_client.h"
#include "client/bridge_pool.h"
#include "client/certificate_watcher.h"
#include "client/command_line.h"
#include "client/provision.h"
#include "client/status_line.h"
#include "client/tunnel_state.h"
#include "common/allocator_tuning.h"
#include "common/log.h"

namespace {

using namespace ot::client;

constexpr std::chrono::hours kRenewalCheckInterval{1};

void say(const std::string& line) {
  std::fprintf(stderr, "%s\n", line.c_str());
}

BridgeConfig bridgeConfig(const CommandLine& line, const Provisioned& provisioned) {
  BridgeConfig config;
  config.relayHost = line.server.host;
  config.relayPort = line.server.port;
  config.domain = tunnelDomain(provisioned.state);
  config.caFile = line.caFile;
  config.tunnelId = provisioned.state.id;
  config.token = provisioned.state.token;
  config.routes[""] = LocalTarget{"127.0.0.1", line.port};
  for (const auto& [name, port] : line.routes) config.routes[name] = LocalTarget{"127.0.0.1", port};
  config.terminateTls = line.terminateTls;
  config.http2 = line.http2;
  config.certificateChainPem = provisioned.state.chainPem;
  config.privateKeyPem = provisioned.state.keyPem;
  config.links = line.links;
  return config;
}

// Everything that lives on the loop. Handles are members of this one object, which outlives
// uv_run; the loop is closed only after every handle's close has run.
class Session {
 public:
  Session(uv_loop_t* loop, const CommandLine& line, ApiClientOptions apiOptions,
          Provisioned provisioned) {
    // The handles first: the pool may report (and ask to stop) as soon as it exists.
    for (uv_signal_t* handle : {&sigint_, &sigterm_}) {
      uv_signal_init(loop, handle);
      handle->data = this;
    }
    uv_timer_init(loop, &stopTimer_);
    stopTimer_.data = this;
    const std::string key = provisioned.state.keyPem;
    pool_ = std::make_unique<BridgePool>(loop, bridgeConfig(line, provisioned),
                                         [this](const PoolStatus& status) { onStatus(status); });
    watcher_ = std::make_unique<CertificateWatcher>(
        loop, std::move(apiOptions), std::move(provisioned),
        std::chrono::duration_cast<std::chrono::milliseconds>(kRenewalCheckInterval),
        [this, key](const std::string& chain) {
          if (stopping_) return;
          pool_->updateCertificate(chain, key);
          say("otunnel: certificate renewed");
        },
        [](const std::string& message) { say(message); });
  }

  void start() {
    uv_signal_start(&sigint_, onSignal, SIGINT);
    uv_signal_start(&sigterm_, onSignal, SIGTERM);
    watcher_->start();
    pool_->start();
  }

  [[nodiscard]] int exitCode() const { return exitCode_; }

  // After uv_run: the pool's handles are closed; the watcher joins its thread.
  void destroy() {
    watcher_.reset();
    pool_.reset();
  }

 private:
  void onStatus(const PoolStatus& status) {
    if (stopping_) return;
    const std::optional<std::string> line = statusLine(status);
    const std::string key = statusKey(status);
    if (line && key != lastKey_) {
      say(*line);
      lastKey_ = key;
    }
    if (status.fatal) requestStop(1);
  }

  static void onSignal(uv_signal_t* handle, int) {
    auto* self = static_cast<Session*>(handle->data);
    if (self->stopping_) {
      // A second Ctrl-C: the user does not want to wait for the bridges to close.
      say("otunnel: stopped without closing the bridges");
      std::_Exit(self->exitCode_ == 0 ? 130 : self->exitCode_);
    }
    self->requestStop(0);
  }

  // Stops on a fresh stack: the pool may be reporting from deep inside one of its callbacks.
  void requestStop(int code) {
    if (stopping_) return;
    stopping_ = true;
    exitCode_ = code;
    uv_timer_start(&stopTimer_, onStopTimer, 0, 0);
  }

  static void onStopTimer(uv_timer_t* handle) {
    auto* self = static_cast<Session*>(handle->data);
    self->watcher_->close();
    self->pool_->stop([self] {
      for (uv_signal_t* signal : {&self->sigint_, &self->sigterm_}) {
        uv_close(reinterpret_cast<uv_handle_t*>(signal), nullptr);
      }
      uv_close(reinterpret_cast<uv_handle_t*>(&self->stopTimer_), nullptr);
    });
  }

  std::unique_ptr<BridgePool> pool_;
  std::unique_ptr<CertificateWatcher> watcher_;
  uv_signal_t sigint_{};
  uv_signal_t sigterm_{};
  uv_timer_t stopTimer_{};
  bool stopping_ = false;
  int exitCode_ = 0;
  std::string lastKey_;
};

int run(const CommandLine& line) {
  ot::log::init({.format = ot::log::Format::kText, .level = line.logLevel, .target = "otunnel"});
  std::string stateDir = line.stateDir;
  if (stateDir.empty()) {
    auto found = defaultStateDir([](const char* name) { return std::getenv(name); });
    if (!found) {
      say("otunnel: no state directory: pass --state-dir or set OTUNNEL_STATE_DIR or HOME");
      return 2;
    }
    stateDir = *found;
  }
  ApiClientOptions apiOptions;
  apiOptions.server = line.server;
  apiOptions.caFile = line.caFile;
  const ApiClient api(apiOptions);

  ProvisionOptions provisionOptions;
  provisionOptions.stateDir = stateDir;
  provisionOptions.wantedId = line.wantedId;
  provisionOptions.wildcard = !line.routes.empty();
  provisionOptions.passthrough = !line.terminateTls;
  provisionOptions.issueTimeout = line.issueTimeout;
  provisionOptions.say = say;
  auto provisioned = provisionTunnel(api, provisionOptions);
  if (!provisioned) {
    say("otunnel: " + provisioned.error().message);
    return 1;
  }
  const std::string url = publicUrl(provisioned->state.hostname, line.server);
  const auto printUrl = [&url] {
    std::printf("%s\n", url.c_str());
    std::fflush(stdout);
  };
  if (line.provisionOnly) {
    printUrl();
    return 0;
  }
  if (line.server.scheme == "http") {
    say("otunnel: note: an http:// server is for development; bridges still use TLS to " +
        line.server.hostPort());
  }

  uv_loop_t loop;
  if (int error = uv_loop_init(&loop); error != 0) {
    say(std::string("otunnel: cannot start the event loop: ") + uv_strerror(error));
    return 1;
  }
  int code = 0;
  {
    Session session(&loop, line, apiOptions, std::move(provisioned).value());
    session.start();
    // After the signal handlers are in place: whoever reads the URL may stop otunnel at once.
    printUrl();
    uv_run(&loop, UV_RUN_DEFAULT);
    code = session.exitCode();
    session.destroy();
  }
  // Anything still open is a bug elsewhere; close it rather than leak the loop.
  if (uv_loop_close(&loop) == UV_EBUSY) {
    uv_walk(
        &loop,
        [](uv_handle_t* handle, void*) {
          if (!uv_is_closing(handle)) uv_close(handle, nullptr);
        },
        nullptr);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
  }
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  // A visitor or the relay closing a socket mid-write must be an EPIPE, not the end of otunnel.
  std::signal(SIGPIPE, SIG_IGN);
  (void)ot::memory::tuneAllocatorForStreaming();  // refused only costs speed
  auto parsed = parseCommandLine(argc, argv);
  if (const int* code = std::get_if<int>(&parsed)) return *code;
  return run(std::get<CommandLine>(parsed));
}
