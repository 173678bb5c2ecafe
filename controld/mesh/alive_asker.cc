#include "controld/mesh/alive_asker.h"

#include <array>
#include <optional>
#include <utility>

#include "common/address_resolver.h"
#include "common/clock.h"
#include "common/mesh_proof.h"
#include "controld/mesh/mesh_settings.h"

namespace ot::mesh {

// One question's connection. Owns itself: deleted once its two handles have closed, after it
// finished (answered, failed, timed out) or was cancelled. `done` is called at most once, never
// after cancel().
class AliveQuestion {
 public:
  using Done = std::function<void(AliveCheckResult)>;

  AliveQuestion(uv_loop_t* loop, std::string secret, SignedEnvelope envelope, Done done)
      : secret_(std::move(secret)), envelope_(std::move(envelope)), done_(std::move(done)) {
    uv_tcp_init(loop, &tcp_);
    tcp_.data = this;
    uv_timer_init(loop, &timer_);
    timer_.data = this;
  }
  AliveQuestion(const AliveQuestion&) = delete;
  AliveQuestion& operator=(const AliveQuestion&) = delete;

  // `target` or `line` missing: the question fails (refused) on the next loop turn, never inside
  // this call, so the caller has recorded the question before it can end.
  void start(const sockaddr_storage& source, const std::optional<sockaddr_storage>& target,
             std::string line, int64_t timeoutMs) {
    line_ = std::move(line);
    if (!target || line_.empty() ||
        uv_tcp_bind(&tcp_, reinterpret_cast<const sockaddr*>(&source), 0) != 0) {
      return failSoon();
    }
    connect_.data = this;
    if (uv_tcp_connect(&connect_, &tcp_, reinterpret_cast<const sockaddr*>(&*target), onConnect) !=
        0) {
      return failSoon();
    }
    uv_timer_start(
        &timer_,
        [](uv_timer_t* timer) {
          static_cast<AliveQuestion*>(timer->data)->finish(AliveCheckResult::kTimeout);
        },
        static_cast<uint64_t>(timeoutMs), 0);
  }

  void cancel() {
    done_ = nullptr;
    finish(AliveCheckResult::kClosed);
  }

 private:
  void failSoon() {
    uv_timer_start(
        &timer_,
        [](uv_timer_t* timer) {
          static_cast<AliveQuestion*>(timer->data)->finish(AliveCheckResult::kRefused);
        },
        0, 0);
  }

  static void onConnect(uv_connect_t* request, int status) {
    auto* question = static_cast<AliveQuestion*>(request->data);
    if (status == UV_ECANCELED || question->finished_) return;
    if (status != 0) return question->finish(AliveCheckResult::kRefused);
    uv_buf_t buf =
        uv_buf_init(question->line_.data(), static_cast<unsigned int>(question->line_.size()));
    question->write_.data = question;
    if (uv_write(&question->write_, question->stream(), &buf, 1, onWritten) != 0) {
      return question->finish(AliveCheckResult::kClosed);
    }
    const int rc = uv_read_start(
        question->stream(),
        [](uv_handle_t* handle, size_t, uv_buf_t* out) {
          auto* self = static_cast<AliveQuestion*>(handle->data);
          *out = uv_buf_init(self->buffer_.data(), static_cast<unsigned int>(self->buffer_.size()));
        },
        onRead);
    if (rc != 0) question->finish(AliveCheckResult::kClosed);
  }

  static void onWritten(uv_write_t* request, int status) {
    auto* question = static_cast<AliveQuestion*>(request->data);
    if (status != 0 && status != UV_ECANCELED) question->finish(AliveCheckResult::kClosed);
  }

  static void onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
    auto* question = static_cast<AliveQuestion*>(stream->data);
    if (question->finished_) return;
    if (nread < 0) return question->finish(AliveCheckResult::kClosed);
    question->received_.append(buf->base, static_cast<size_t>(nread));
    const size_t newline = question->received_.find('\n');
    if (newline == std::string::npos) {
      if (question->received_.size() >= kMaxHeaderLine) {
        question->finish(AliveCheckResult::kBadAnswer);
      }
      return;
    }
    if (newline + 1 > kMaxHeaderLine) return question->finish(AliveCheckResult::kBadAnswer);
    const auto verified =
        verifyAliveAnswer(std::string_view(question->received_).substr(0, newline),
                          question->secret_, question->envelope_, unixNowMs());
    if (!verified) return question->finish(AliveCheckResult::kBadAnswer);
    switch (*verified) {
      case AliveState::kServing:
        return question->finish(AliveCheckResult::kServing);
      case AliveState::kControlDown:
        return question->finish(AliveCheckResult::kControlDown);
      case AliveState::kDraining:
        return question->finish(AliveCheckResult::kDraining);
    }
    question->finish(AliveCheckResult::kBadAnswer);
  }

  void finish(AliveCheckResult result) {
    if (finished_) return;
    finished_ = true;
    Done done = std::move(done_);
    done_ = nullptr;
    uv_timer_stop(&timer_);
    uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), onClosed);
    uv_close(reinterpret_cast<uv_handle_t*>(&timer_), onClosed);
    if (done) done(result);  // may not touch this object after: it only waits for its handles
  }

  static void onClosed(uv_handle_t* handle) {
    auto* question = static_cast<AliveQuestion*>(handle->data);
    if (++question->closed_ == 2) delete question;
  }

  [[nodiscard]] uv_stream_t* stream() { return reinterpret_cast<uv_stream_t*>(&tcp_); }

  std::string secret_;
  SignedEnvelope envelope_;
  Done done_;
  uv_tcp_t tcp_{};
  uv_timer_t timer_{};
  uv_connect_t connect_{};
  uv_write_t write_{};
  std::string line_;
  std::string received_;
  std::array<char, kMaxHeaderLine> buffer_{};
  bool finished_ = false;
  int closed_ = 0;
};

AliveAsker::AliveAsker(uv_loop_t* loop, MeshMetrics& metrics, const log::Logger& log,
                       AliveAskerSetup setup, DropFn drop)
    : loop_(loop),
      metrics_(metrics),
      log_(log),
      setup_(std::move(setup)),
      drop_(std::move(drop)),
      liveness_(setup_.times) {}

AliveAsker::~AliveAsker() {
  close();
}

void AliveAsker::hold(const std::string& machine, const std::string& address, int64_t lastHeardMs) {
  if (!liveness_.held(machine)) {
    log_.info("mesh peer held: asking its relayd", {{"peer", machine}, {"address", address}});
  }
  liveness_.hold(machine, address, lastHeardMs, now());
  metrics_.heldMachines(liveness_.size());
  for (const auto& due : liveness_.dueAsks(now())) ask(due);
}

void AliveAsker::release(const std::string& machine) {
  if (!liveness_.release(machine)) return;
  cancel(machine);
  answeredOnce_.erase(machine);
  metrics_.heldMachines(liveness_.size());
  log_.info("mesh peer hold ended: linked again", {{"peer", machine}});
}

void AliveAsker::tick() {
  for (const auto& expired : liveness_.expire(now())) {
    cancel(expired.machine);
    dropped(expired.machine, expired.reason);
  }
  for (const auto& due : liveness_.dueAsks(now())) ask(due);
}

void AliveAsker::close() {
  for (auto& [machine, question] : inFlight_) question->cancel();
  inFlight_.clear();
  for (const auto& machine : liveness_.heldMachines()) liveness_.forget(machine);
  answeredOnce_.clear();
}

void AliveAsker::ask(const PeerLiveness::Ask& due) {
  std::string line;
  SignedEnvelope envelope{setup_.selfId, due.machine, unixNowMs(), {}};
  if (const auto nonce = randomNonce()) {
    envelope.nonce = *nonce;
    line = buildAliveQuestion(setup_.secret, envelope).value_or(std::string());
  }
  std::optional<sockaddr_storage> target;
  if (const auto address = parseHostPort(due.address)) {
    target = resolveWithoutDns(address->host, address->port);
  }
  auto* question = new AliveQuestion(loop_, setup_.secret, envelope,
                                     [this, machine = due.machine](AliveCheckResult result) {
                                       inFlight_.erase(machine);
                                       answered(machine, result);
                                     });
  inFlight_[due.machine] = question;
  question->start(setup_.source, target, std::move(line), due.timeoutMs);
}

void AliveAsker::answered(const std::string& machine, AliveCheckResult result) {
  metrics_.aliveCheck(aliveCheckResultName(result));
  switch (liveness_.answered(machine, result, now())) {
    case PeerLiveness::Verdict::kKeep:
      if (answeredOnce_.insert(machine).second) {
        log_.info("mesh peer's relayd is up: its entries are kept",
                  {{"peer", machine}, {"state", aliveCheckResultName(result)}});
      }
      break;
    case PeerLiveness::Verdict::kDrop:
      dropped(machine, keepsHold(result) ? "hold_expired" : aliveCheckResultName(result));
      break;
    case PeerLiveness::Verdict::kUnknown:
      break;
  }
}

void AliveAsker::cancel(const std::string& machine) {
  auto found = inFlight_.find(machine);
  if (found == inFlight_.end()) return;
  found->second->cancel();
  inFlight_.erase(found);
}

void AliveAsker::dropped(const std::string& machine, std::string_view reason) {
  answeredOnce_.erase(machine);
  metrics_.heldMachines(liveness_.size());
  log_.warn("mesh peer dropped", {{"peer", machine}, {"reason", reason}});
  drop_(machine, reason);
}

}  // namespace ot::mesh
