#include "client/certificate_watcher.h"

#include <algorithm>

#include "client/key_material.h"

namespace ot::client {

CertificateWatcher::CertificateWatcher(uv_loop_t* loop, ApiClientOptions apiOptions,
                                       Provisioned provisioned, std::chrono::milliseconds interval,
                                       OnRenewed onRenewed, OnMessage onMessage)
    : loop_(loop),
      apiOptions_(std::move(apiOptions)),
      provisioned_(std::move(provisioned)),
      interval_(interval),
      onRenewed_(std::move(onRenewed)),
      onMessage_(std::move(onMessage)) {
  async_.data = this;
}

CertificateWatcher::~CertificateWatcher() {
  {
    // Under the mutex, so the thread cannot miss the wake-up between its check and its wait.
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void CertificateWatcher::start() {
  if (started_) return;
  started_ = true;
  uv_async_init(loop_, &async_, onAsync);
  asyncOpen_ = true;
  // Calls in flight give up as soon as close() sets stopping_.
  apiOptions_.cancel = &stopping_;
  thread_ = std::thread([this] { run(); });
}

void CertificateWatcher::close() {
  std::lock_guard lock(mutex_);
  stopping_ = true;
  wake_.notify_all();
  if (!asyncOpen_) return;
  // Under the mutex: the thread checks asyncOpen_ before every uv_async_send.
  asyncOpen_ = false;
  events_.clear();
  uv_close(reinterpret_cast<uv_handle_t*>(&async_), nullptr);
}

void CertificateWatcher::run() {
  constexpr std::chrono::milliseconds kUncheckedFirst{2'000};
  constexpr std::chrono::milliseconds kUncheckedMax{60'000};
  const ApiClient api(apiOptions_);
  std::chrono::milliseconds uncheckedWait = kUncheckedFirst;
  while (true) {
    const std::chrono::milliseconds wait =
        provisioned_.unchecked ? std::min(uncheckedWait, interval_) : interval_;
    {
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, wait, [this] { return stopping_.load(); });
    }
    if (stopping_) return;
    const bool answered = checkOnce(api);
    if (stopping_) return;
    if (provisioned_.unchecked && answered) {
      provisioned_.unchecked = false;
      post({false, "otunnel: the control plane answers again; the saved tunnel " +
                       provisioned_.state.id + " is checked"});
    } else if (provisioned_.unchecked) {
      uncheckedWait = std::min(uncheckedWait * 2, kUncheckedMax);
    }
  }
}

bool CertificateWatcher::checkOnce(const ApiClient& api) {
  const TunnelState& state = provisioned_.state;
  auto certificate = api.getCertificate(state.id, state.token);
  if (stopping_) return false;
  if (!certificate) {
    // The certificate in use stays valid; the next check tries again.
    const ApiError& error = certificate.error();
    if (error.status == 401 || error.status == 404) {
      post({false, "otunnel: the server no longer knows the tunnel " + state.id + " (" +
                       error.describe() + "); the relay will refuse it"});
      return true;
    }
    post({false, "otunnel: cannot check the certificate: " + error.describe()});
    return error.status != 0 && error.status != 429 && error.status < 500;
  }
  if (certificate->state != "ready" || certificate->chain == state.chainPem) return true;
  if (!certificateMatchesKey(certificate->chain, state.keyPem)) {
    post({false,
          "otunnel: the server's new certificate is not for this client's key; keeping "
          "the current one"});
    return true;
  }
  if (Status saved = saveCertificate(provisioned_, certificate->chain); !saved.ok()) {
    post({false, "otunnel: cannot save the renewed certificate: " + saved.error().message});
  }
  post({true, certificate->chain});
  return true;
}

void CertificateWatcher::post(Event event) {
  std::lock_guard lock(mutex_);
  if (!asyncOpen_) return;
  events_.push_back(std::move(event));
  uv_async_send(&async_);
}

void CertificateWatcher::onAsync(uv_async_t* handle) {
  auto* self = static_cast<CertificateWatcher*>(handle->data);
  std::deque<Event> events;
  {
    std::lock_guard lock(self->mutex_);
    if (!self->asyncOpen_) return;
    events.swap(self->events_);
  }
  for (const Event& event : events) {
    if (event.renewed) {
      if (self->onRenewed_) self->onRenewed_(event.text);
    } else if (self->onMessage_) {
      self->onMessage_(event.text);
    }
  }
}

}  // namespace ot::client
