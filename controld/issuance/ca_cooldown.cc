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
  const nlohmann::ordered_json body = {{"until_ms", state.until_ms},
                                       {"level", state.level},
                                       {"consecutive_failures", state.consecutive_failures}};
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
  state.until_ms = *until;
  state.level = static_cast<int>(std::min<int64_t>(*level, kMaxCount));
  state.consecutive_failures = static_cast<int>(std::min<int64_t>(*failures, kMaxCount));
  return state;
}

int64_t caCooldownDurationMs(int level) {
  int64_t duration = kCaCooldownFirstMs;
  for (int i = 1; i < level && duration < kCaCooldownMaxMs; ++i) duration *= 2;
  return std::min(duration, kCaCooldownMaxMs);
}

CaCooldownStep caCooldownAfterSuccess(const CaCooldownState& state, int64_t now_ms) {
  CaCooldownStep step;
  step.ended = state.activeAt(now_ms);
  return step;  // next: the empty state
}

CaCooldownStep caCooldownAfterFailure(const CaCooldownState& state, const FailureDetail& detail,
                                      int64_t now_ms) {
  CaCooldownStep step;
  step.next = state;
  if (!detail.points_at_ca && !detail.rate_limited) return step;
  CaCooldownState& next = step.next;
  if (detail.points_at_ca) next.consecutive_failures = std::min(next.consecutive_failures + 1, kMaxCount);
  const int64_t retry_after = detail.rate_limited ? std::max<int64_t>(0, detail.retry_after_ms) : 0;
  const bool trigger =
      detail.rate_limited || next.consecutive_failures >= kCaFailuresBeforeCooldown;
  if (!trigger) return step;
  if (state.activeAt(now_ms)) {
    // Already paused: only the CA's own word (Retry-After) moves the end.
    if (retry_after > 0) next.until_ms = std::max(next.until_ms, now_ms + retry_after);
    return step;
  }
  next.level = std::min(next.level + 1, kMaxCount);
  next.until_ms = now_ms + std::max(caCooldownDurationMs(next.level), retry_after);
  next.consecutive_failures = 0;
  step.started = true;
  return step;
}

}  // namespace ot::controld
