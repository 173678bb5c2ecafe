// The loop side of ControlClient: the public methods and the hand-off of what the gRPC threads
// learn to the loop thread. Attach authorization is in control_authorize.cc, the unary calls in
// control_calls.cc, the session thread in control_session.cc.
#include "relayd/control_client.h"

#include <chrono>
#include <exception>
#include <system_error>
#include <utility>

#include "common/clock.h"
#include "relayd/control_client_impl.h"

namespace ot::relayd {
namespace {

std::shared_ptr<grpc::Channel> makeChannel(const std::string& socketPath) {
  grpc::ChannelArguments args;
  // controld is local: when it restarts, find it again within a second.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // gRPC's name for the connect timeout (default 20 s): a controld that accepts the socket but
  // never completes the HTTP/2 handshake (frozen) fails the attempt after 5 s.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5'000);
  // A frozen controld (SIGSTOP) keeps the socket open: pings find it within ~15 s. controld's
  // server must allow pings this often (GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS
  // <= 10 s and GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS), or it answers GOAWAY too_many_pings.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return grpc::CreateCustomChannel("unix:" + socketPath, grpc::InsecureChannelCredentials(), args);
}

}  // namespace

// ---- LoopInbox

void LoopInbox::post(std::function<void()> work) {
  std::lock_guard lock(mutex_);
  if (closed_) return;
  work_.push_back(std::move(work));
  // Under the lock: close() cannot slip in between, so the handle is still open here.
  uv_async_send(async_);
}

std::deque<std::function<void()>> LoopInbox::take() {
  std::lock_guard lock(mutex_);
  return std::exchange(work_, {});
}

std::deque<std::function<void()>> LoopInbox::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
  return std::exchange(work_, {});
}

// ---- Impl, loop side

ControlClient::Impl::Impl(uv_loop_t* loop, ControlClientOptions options, ControlEvents events)
    : loop_(loop),
      options_(std::move(options)),
      events_(std::move(events)),
      channel_(makeChannel(options_.socketPath)),
      stub_(v1::RelayControl::NewStub(channel_)) {
  // Fails only for a loop that is not initialised: a programming error, not a runtime condition.
  const int rc = uv_async_init(loop_, &async_, [](uv_async_t* handle) {
    auto* self = static_cast<Impl*>(handle->data);
    if (self == nullptr || uv_is_closing(reinterpret_cast<uv_handle_t*>(handle)) != 0) return;
    self->runPosted();
  });
  if (rc != 0) log_.critical("uv_async_init failed", {{"error", uv_strerror(rc)}});
  async_.data = this;
  uv_timer_init(loop_, &authorizeTimer_);
  authorizeTimer_.data = this;
  uv_timer_init(loop_, &deltaTimer_);
  deltaTimer_.data = this;
  handlesOpen_ = 3;
  try {
    completionThread_ = std::thread([this] { completionLoop(); });
  } catch (const std::system_error& e) {
    log_.error("cannot start the control calls thread", {{"error", e.what()}});
  }
}

ControlClient::Impl::~Impl() {
  // Normally reached through the close callback, after stop() joined every thread.
  if (sessionThread_.joinable()) sessionThread_.join();
  cancelCalls();
}

void ControlClient::Impl::runPosted() {
  auto work = inbox_.take();
  for (auto& item : work) {
    if (stopped_) break;  // a callback stopped the client: the rest is dropped
    try {
      item();
    } catch (const std::exception& e) {
      log_.error("control callback threw", {{"error", e.what()}});
    } catch (...) {
      log_.error("control callback threw", {{"error", "unknown"}});
    }
  }
}

void ControlClient::Impl::start() {
  if (started_ || stopped_) return;
  started_ = true;
  {
    std::lock_guard lock(mutex_);
    intervalStartUnixMs_ = unixNowMs();
  }
  try {
    sessionThread_ = std::thread([this] { sessionLoop(); });
  } catch (const std::system_error& e) {
    log_.error("cannot start the control session thread", {{"error", e.what()}});
  }
}

void ControlClient::Impl::stop(std::shared_ptr<Impl> self) {
  if (stopped_) return;
  stopped_ = true;
  if (sessionThread_.joinable()) {
    std::unique_lock lock(mutex_);
    releaseDeltasLocked();  // flushed with the rest of the outbox
    stopping_ = true;
    // Not accepted yet: nothing to flush, so do not wait for a controld that may never answer.
    if (!accepted_ && context_ != nullptr) context_->TryCancel();
    wake_.notify_all();
    if (!exited_.wait_for(lock, kStopLinger, [this] { return sessionExited_; })) {
      if (context_ != nullptr) context_->TryCancel();
    }
    lock.unlock();
    sessionThread_.join();
  }
  cancelCalls();
  // Destroyed here, on the loop thread: queued results and the callbacks of calls in flight.
  { auto dropped = inbox_.close(); }
  authorizeDone_.clear();
  fetchDone_.clear();
  authorizeDeadlines_.clear();
  // The handles are closed last; the Impl lives until both close callbacks ran.
  selfUntilClosed_ = std::move(self);
  auto closed = [](uv_handle_t* handle) {
    auto* impl = static_cast<Impl*>(handle->data);
    if (--impl->handlesOpen_ > 0) return;
    // `keep` may be the last reference: the Impl is freed when this callback returns.
    std::shared_ptr<Impl> keep = std::move(impl->selfUntilClosed_);
  };
  heldDeltas_.clear();
  uv_timer_stop(&authorizeTimer_);
  uv_timer_stop(&deltaTimer_);
  uv_close(reinterpret_cast<uv_handle_t*>(&authorizeTimer_), closed);
  uv_close(reinterpret_cast<uv_handle_t*>(&deltaTimer_), closed);
  uv_close(reinterpret_cast<uv_handle_t*>(&async_), closed);
}

void ControlClient::Impl::deliverSessionState(bool up) {
  if (connected_ == up) return;
  connected_ = up;
  if (events_.onSessionState) events_.onSessionState(up);
}

void ControlClient::Impl::deliverMessage(const v1::ControlMessage& message) {
  switch (message.kind_case()) {
    case v1::ControlMessage::kTunnel:
      if (events_.onTunnel) events_.onTunnel(message.tunnel());
      break;
    case v1::ControlMessage::kTunnelDeleted:
      if (events_.onTunnelDeleted) events_.onTunnelDeleted(message.tunnel_deleted());
      break;
    case v1::ControlMessage::kApiCertificate:
      if (events_.onApiCertificate) events_.onApiCertificate(message.api_certificate());
      break;
    case v1::ControlMessage::kCommand:
      if (events_.onCommand) events_.onCommand(message.command());
      break;
    case v1::ControlMessage::kAuthorized:
      deliverAnswers(message.authorized());
      break;
    case v1::ControlMessage::kMeshSnapshot:
      if (events_.onMeshSnapshot) events_.onMeshSnapshot(message.mesh_snapshot());
      break;
    case v1::ControlMessage::kMeshDelta:
      if (events_.onMeshDelta) events_.onMeshDelta(message.mesh_delta());
      break;
    case v1::ControlMessage::kRecheckRecords:
      if (events_.onRecheckRecords) events_.onRecheckRecords(message.recheck_records());
      break;
    case v1::ControlMessage::kAccepted:     // handled by the session thread
    case v1::ControlMessage::KIND_NOT_SET:  // a kind this relayd does not know (a newer controld)
      break;
  }
}

void ControlClient::Impl::queueLocked(v1::RelayMessage message) {
  releaseDeltasLocked();   // they were reported first: they go first
  if (!streamUp_) return;  // the next snapshot carries it (or it is an ack nobody waits for)
  if (outbox_.size() >= kMaxOutbox) {
    // controld stopped reading: end this stream rather than grow without bound; the next one
    // starts from a snapshot.
    log_.warn("control session outbox overflowed; resyncing", {{"queued", outbox_.size()}});
    streamUp_ = false;
    outbox_.clear();
    if (context_ != nullptr) context_->TryCancel();
    return;
  }
  const bool wasEmpty = outbox_.empty();
  outbox_.push_back(std::move(message));
  // The writer sleeps only on an empty outbox; while it writes it takes the rest afterwards.
  if (wasEmpty) wake_.notify_all();
}

void ControlClient::Impl::holdDelta(v1::RelayMessage message) {
  const bool first = heldDeltas_.empty();
  heldDeltas_.push_back(std::move(message));
  if (first) {
    uv_timer_start(
        &deltaTimer_, [](uv_timer_t* handle) { static_cast<Impl*>(handle->data)->onDeltaTimer(); },
        kDeltaLingerMs, 0);
  }
}

void ControlClient::Impl::releaseDeltasLocked() {
  if (heldDeltas_.empty()) return;
  uv_timer_stop(&deltaTimer_);
  std::vector<v1::RelayMessage> held = std::exchange(heldDeltas_, {});
  if (!streamUp_) return;  // the next snapshot has them (the mirror does)
  if (outbox_.size() + held.size() > kMaxOutbox) {
    log_.warn("control session outbox overflowed; resyncing", {{"queued", outbox_.size()}});
    streamUp_ = false;
    outbox_.clear();
    if (context_ != nullptr) context_->TryCancel();
    return;
  }
  const bool wasEmpty = outbox_.empty();
  for (auto& delta : held) outbox_.push_back(std::move(delta));
  if (wasEmpty) wake_.notify_all();
}

void ControlClient::Impl::onDeltaTimer() {
  std::lock_guard lock(mutex_);
  releaseDeltasLocked();
}

void ControlClient::Impl::takeSnapshot(uint64_t request) {
  // The copy is made here, without the lock: the loop is the mirror's only user. Every delta the
  // loop reported before this step is in it; every one after it is queued in the outbox opened
  // below, in the same loop step, so none is lost or sent twice.
  std::vector<v1::RelayMessage> parts = mirror_.snapshot();
  const bool draining = drainingDeadline_.has_value();
  std::lock_guard lock(mutex_);
  if (request != snapshotRequest_ || stopping_) return;  // that attempt gave up meanwhile
  snapshotParts_ = std::move(parts);
  helloDraining_ = draining;
  outbox_.clear();
  // Held deltas are in the copy above: the new stream must not see them twice.
  heldDeltas_.clear();
  uv_timer_stop(&deltaTimer_);
  streamUp_ = true;
  ++streamGeneration_;
  wake_.notify_all();
}

void ControlClient::Impl::finishAuthorize(uint64_t id, Result<v1::AuthorizeAttachResponse> result) {
  auto it = authorizeDone_.find(id);
  if (it == authorizeDone_.end()) return;
  AuthorizeDone done = std::move(it->second.done);
  authorizeDone_.erase(it);
  if (done) done(std::move(result));
}

void ControlClient::Impl::finishFetch(uint64_t id, Result<v1::FetchTunnelResponse> result) {
  auto it = fetchDone_.find(id);
  if (it == fetchDone_.end()) return;
  FetchDone done = std::move(it->second);
  fetchDone_.erase(it);
  if (done) done(std::move(result));
}

// ---- ControlClient

ControlClient::ControlClient(uv_loop_t* loop, ControlClientOptions options, ControlEvents events)
    : impl_(std::make_shared<Impl>(loop, std::move(options), std::move(events))) {}

ControlClient::~ControlClient() {
  stop();
}

void ControlClient::start() {
  impl_->start();
}

void ControlClient::stop() {
  impl_->stop(impl_);
}

bool ControlClient::connected() const {
  return impl_->connected_;
}

uint64_t ControlClient::sessionAttempts() const {
  return impl_->sessionAttempts_.load(std::memory_order_relaxed);
}

void ControlClient::bridgeAttached(v1::Bridge bridge) {
  if (impl_->stopped_) return;
  v1::RelayMessage message;
  *message.mutable_attached()->mutable_bridge() = bridge;  // the one copy: the mirror takes it
  impl_->mirror_.attached(std::move(bridge));
  impl_->holdDelta(std::move(message));
}

void ControlClient::bridgeDetached(const std::string& bridgeId, const std::string& tunnelId,
                                   v1::DetachReason reason, int64_t detachedAtUnixMs) {
  if (impl_->stopped_) return;
  v1::RelayMessage message;
  v1::BridgeDetached* detached = message.mutable_detached();
  detached->set_bridge_id(bridgeId);
  detached->set_tunnel_id(tunnelId);
  detached->set_reason(reason);
  detached->set_detached_at_unix_ms(detachedAtUnixMs);
  impl_->mirror_.detached(bridgeId);
  impl_->holdDelta(std::move(message));
}

void ControlClient::addUsage(const std::string& tunnelId, uint64_t bytesIn, uint64_t bytesOut,
                             uint64_t connections, uint64_t rejected, const std::string& origin) {
  if (impl_->stopped_) return;
  std::lock_guard lock(impl_->mutex_);
  impl_->usage_.add(tunnelId, bytesIn, bytesOut, connections, rejected, origin);
}

void ControlClient::draining(int64_t deadlineUnixMs) {
  if (impl_->stopped_) return;
  v1::RelayMessage message;
  message.mutable_draining()->set_deadline_unix_ms(deadlineUnixMs);
  impl_->drainingDeadline_ = deadlineUnixMs;
  std::lock_guard lock(impl_->mutex_);
  impl_->queueLocked(std::move(message));
}

void ControlClient::serving() {
  impl_->drainingDeadline_.reset();
}

void ControlClient::ack(const v1::Ack& ack) {
  if (impl_->stopped_) return;
  v1::RelayMessage message;
  *message.mutable_ack() = ack;
  std::lock_guard lock(impl_->mutex_);
  impl_->queueLocked(std::move(message));
}

void ControlClient::tunnelStatus(v1::TunnelStatusReply reply) {
  if (impl_->stopped_) return;
  v1::RelayMessage message;
  *message.mutable_tunnel_status() = std::move(reply);
  std::lock_guard lock(impl_->mutex_);
  impl_->queueLocked(std::move(message));
}

void ControlClient::requestMeshSnapshot(uint64_t haveVersion, uint64_t gotVersion) {
  if (impl_->stopped_) return;
  v1::RelayMessage message;
  message.mutable_mesh_snapshot_request()->set_have_version(haveVersion);
  message.mutable_mesh_snapshot_request()->set_got_version(gotVersion);
  std::lock_guard lock(impl_->mutex_);
  impl_->queueLocked(std::move(message));
}

}  // namespace ot::relayd
