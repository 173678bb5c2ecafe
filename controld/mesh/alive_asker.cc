#include "controld/mesh/alive_asker.h"

#include <optional>
#include <utility>

#include "common/address_resolver.h"
#include "common/clock.h"
#include "common/mesh_proof.h"
#include "controld/mesh/mesh_settings.h"

namespace ot::mesh {

namespace {

// The answer is one line; a few bytes past it (nothing should follow) do not make it too large.
constexpr size_t kMaxAnswerBytes = 4 * kMaxHeaderLine;

HttpParse answerLine(std::string_view bytes) {
  if (bytes.find('\n') != std::string_view::npos) return HttpParse::kComplete;
  return bytes.size() >= kMaxHeaderLine ? HttpParse::kInvalid : HttpParse::kNeedMore;
}

AliveCheckResult judge(const std::optional<std::string>& bytes, ExchangeEnd end,
                       std::string_view secret, const SignedEnvelope& envelope) {
  if (!bytes) {
    switch (end) {
      case ExchangeEnd::kRefused:
        return AliveCheckResult::kRefused;
      case ExchangeEnd::kTimeout:
        return AliveCheckResult::kTimeout;
      case ExchangeEnd::kTooLarge:
        return AliveCheckResult::kBadAnswer;
      case ExchangeEnd::kComplete:
      case ExchangeEnd::kClosed:
        return AliveCheckResult::kClosed;
    }
  }
  const size_t newline = bytes->find('\n');
  if (newline == std::string::npos || newline + 1 > kMaxHeaderLine) {
    return AliveCheckResult::kBadAnswer;
  }
  const auto verified =
      verifyAliveAnswer(std::string_view(*bytes).substr(0, newline), secret, envelope, unixNowMs());
  if (!verified) return AliveCheckResult::kBadAnswer;
  switch (*verified) {
    case AliveState::kServing:
      return AliveCheckResult::kServing;
    case AliveState::kControlDown:
      return AliveCheckResult::kControlDown;
    case AliveState::kDraining:
      return AliveCheckResult::kDraining;
  }
  return AliveCheckResult::kBadAnswer;
}

}  // namespace

AliveAsker::AliveAsker(uv_loop_t* loop, MeshMetrics& metrics, const log::Logger& log,
                       AliveAskerSetup setup, DropFn drop)
    : loop_(loop),
      metrics_(metrics),
      log_(log),
      setup_(std::move(setup)),
      drop_(std::move(drop)),
      liveness_(setup_.times),
      exchanges_(loop) {}

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
  exchanges_.closeAll();
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
  if (!target || line.empty()) return answered(due.machine, AliveCheckResult::kRefused);
  InternalExchange* question = exchanges_.dial(
      setup_.source, *target, std::move(line), kMaxAnswerBytes,
      static_cast<uint64_t>(due.timeoutMs), answerLine,
      [this, machine = due.machine, envelope](InternalExchange& exchange,
                                              std::optional<std::string> bytes) {
        const AliveCheckResult result = judge(bytes, exchange.end(), setup_.secret, envelope);
        exchange.close();
        inFlight_.erase(machine);
        answered(machine, result);
      });
  if (question != nullptr) inFlight_[due.machine] = question;
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
