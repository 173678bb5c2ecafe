#include "controld/issuance/ca_cooldown.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

namespace ot::controld {
namespace {

// Levels and counts stop growing here: the duration is capped long before, and a stored value
// never overflows however long the CA stays down.
constexpr int kMaxCount = 1000;

std::optional<int64_t> integerField(const nlohmann::json& object, const char* name) {
  const auto found = object.find(name);
  if (found == object.end()) return std::nullopt;
  if (found->is_number_unsigned()) {
    const auto value = found->get<uint64_t>();
    if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(value);
  }
  if (found->is_number_integer()) return found->get<int64_t>();
  return std::nullopt;
}

}  // namespace

std::string encodeCaCooldown(const CaCooldownState& state) {
  const nlohmann::ordered_json body = {{"until_ms", state.untilMs},
                                       {"level", state.level},
                                       {"consecutive_failures", state.consecutiveFailures}};
  return body.dump();
}

std::optional<CaCooldownState> decodeCaCooldown(std::string_view text) {
  const auto body = nlohmann::json::parse(text, nullptr, false);
  if (body.is_discarded() || !body.is_object()) return std::nullopt;
  const auto until = integerField(body, "until_ms");
  const auto level = integerField(body, "level");
  const auto failures = integerField(body, "consecutive_failures");
  if (!until || !level || !failures) return std::nullopt;
  if (*until < 0 || *level < 0 || *failures < 0) return std::nullopt;
  CaCooldownState state;
  state.untilMs = *until;
  state.level = static_cast<int>(std::min<int64_t>(*level, kMaxCount));
  state.consecutiveFailures = static_cast<int>(std::min<int64_t>(*failures, kMaxCount));
  return state;
}

int64_t caCooldownDurationMs(int level) {
  int64_t duration = kCaCooldownFirstMs;
  for (int i = 1; i < level && duration < kCaCooldownMaxMs; ++i) duration *= 2;
  return std::min(duration, kCaCooldownMaxMs);
}

CaCooldownStep caCooldownAfterSuccess(const CaCooldownState& state, int64_t nowMs) {
  CaCooldownStep step;
  step.ended = state.activeAt(nowMs);
  return step;  // next: the empty state
}

CaCooldownStep caCooldownAfterFailure(const CaCooldownState& state, const FailureDetail& detail,
                                      int64_t nowMs) {
  CaCooldownStep step;
  step.next = state;
  if (!detail.pointsAtCa && !detail.rateLimited) return step;
  CaCooldownState& next = step.next;
  if (detail.pointsAtCa)
    next.consecutiveFailures = std::min(next.consecutiveFailures + 1, kMaxCount);
  const int64_t retryAfter = detail.rateLimited ? std::max<int64_t>(0, detail.retryAfterMs) : 0;
  const bool trigger = detail.rateLimited || next.consecutiveFailures >= kCaFailuresBeforeCooldown;
  if (!trigger) return step;
  if (state.activeAt(nowMs)) {
    // Already paused: only the CA's own word (Retry-After) moves the end.
    if (retryAfter > 0) next.untilMs = std::max(next.untilMs, nowMs + retryAfter);
    return step;
  }
  next.level = std::min(next.level + 1, kMaxCount);
  next.untilMs = nowMs + std::max(caCooldownDurationMs(next.level), retryAfter);
  next.consecutiveFailures = 0;
  step.started = true;
  return step;
}

}  // namespace ot::controld
