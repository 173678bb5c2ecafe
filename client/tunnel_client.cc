#include "client/tunnel_client.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <utility>

#include "client/bridge_pool.h"
#include "client/certificate_watcher.h"
#include "client/dialer.h"
#include "client/origin_material.h"
#include "client/status_line.h"
#include "client/status_report.h"
#include "client/status_writer.h"
#include "client/tunnel_state.h"

namespace ot::client {
namespace {

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
  config.origin = line.origin;
  config.credential = line.credential;
  return config;
}

}  // namespace

TunnelClient::Loop::Loop() {
  initError_ = uv_loop_init(&loop_);
}

TunnelClient::Loop::~Loop() {
  if (initError_ != 0) return;
  // Anything still open is a bug elsewhere; close it rather than leak the loop.
  if (uv_loop_close(&loop_) == UV_EBUSY) {
    uv_walk(
        &loop_,
        [](uv_handle_t* handle, void*) {
          if (!uv_is_closing(handle)) uv_close(handle, nullptr);
        },
        nullptr);
    uv_run(&loop_, UV_RUN_DEFAULT);
    uv_loop_close(&loop_);
  }
}

TunnelClient::TunnelClient(const CommandLine& line, ApiClientOptions apiOptions,
                           Provisioned provisioned) {
  if (loop_.initError() != 0) return;
  uv_loop_t* loop = loop_.get();
  // The handles first: the pool may report (and ask to stop) as soon as it exists.
  for (uv_signal_t* handle : {&sigint_, &sigterm_}) {
    uv_signal_init(loop, handle);
    handle->data = this;
  }
  uv_timer_init(loop, &stopTimer_);
  stopTimer_.data = this;
  const std::string key = provisioned.state.keyPem;
  pool_ = std::make_unique<Dialer>(loop, bridgeConfig(line, provisioned), line.profiles, line.links,
                                   [this](const PoolStatus& status) { onStatus(status); });
  statusWriter_ =
      std::make_unique<StatusWriter>(loop, statusFilePath(line.stateDir, provisioned.state.id),
                                     [this] { return pool_->detailedStatus(); });
  statusReporter_ = std::make_unique<StatusReporter>(
      loop, [this] { return pool_->detailedStatus(); },
      [this](const std::string& text, TextTiming timing) {
        return pool_->sendToAttached(text, timing);
      });
  if (!line.credential.empty()) {
    // A second origin has no token to ask the API with: its certificate comes from the state
    // file copied from the owner, re-read now and then (origin_material.h).
    reloader_ = std::make_unique<OriginReloader>(
        loop, provisioned.statePath, key, provisioned.state.chainPem,
        std::chrono::duration_cast<std::chrono::milliseconds>(kOriginReloadInterval),
        [this, key](const std::string& chain) {
          if (stopping_) return;
          pool_->updateCertificate(chain, key);
          say("otunnel: certificate renewed (from the copied state file)");
        });
    return;
  }
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

// The watcher joins its thread, then the pool (whose handles closed inside run) goes; the loop
// is closed last, by its own member.
TunnelClient::~TunnelClient() = default;

int TunnelClient::run(const std::function<void()>& onStarted) {
  if (loop_.initError() != 0) {
    say(std::string("otunnel: cannot start the event loop: ") + uv_strerror(loop_.initError()));
    return 1;
  }
  uv_signal_start(&sigint_, onSignal, SIGINT);
  uv_signal_start(&sigterm_, onSignal, SIGTERM);
  if (watcher_) watcher_->start();
  if (reloader_) reloader_->start();
  pool_->start();
  statusWriter_->start();
  statusReporter_->start();
  onStarted();
  uv_run(loop_.get(), UV_RUN_DEFAULT);
  statusWriter_->remove();  // a stopped otunnel leaves no status behind
  return exitCode_;
}

void TunnelClient::onStatus(const PoolStatus& status) {
  if (stopping_) return;
  const std::optional<std::string> line = statusLine(status);
  const std::string key = statusKey(status);
  if (line && key != lastKey_) {
    say(*line);
    lastKey_ = key;
  }
  if (status.fatal) requestStop(1);
  if (status.attached > lastAttached_ && statusReporter_) statusReporter_->linkAttached();
  lastAttached_ = status.attached;
}

void TunnelClient::onSignal(uv_signal_t* handle, int) {
  auto* self = static_cast<TunnelClient*>(handle->data);
  if (self->stopping_) {
    // A second Ctrl-C: the user does not want to wait for the bridges to close.
    say("otunnel: stopped without closing the bridges");
    std::_Exit(self->exitCode_ == 0 ? 130 : self->exitCode_);
  }
  self->requestStop(0);
}

void TunnelClient::requestStop(int code) {
  if (stopping_) return;
  stopping_ = true;
  exitCode_ = code;
  uv_timer_start(&stopTimer_, onStopTimer, 0, 0);
}

void TunnelClient::onStopTimer(uv_timer_t* handle) {
  auto* self = static_cast<TunnelClient*>(handle->data);
  if (self->watcher_) self->watcher_->close();
  if (self->reloader_) self->reloader_->close();
  self->statusWriter_->close();
  self->statusReporter_->close();
  self->pool_->stop([self] {
    for (uv_signal_t* signal : {&self->sigint_, &self->sigterm_}) {
      uv_close(reinterpret_cast<uv_handle_t*>(signal), nullptr);
    }
    uv_close(reinterpret_cast<uv_handle_t*>(&self->stopTimer_), nullptr);
  });
}

}  // namespace ot::client
