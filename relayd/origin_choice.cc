#include "relayd/origin_choice.h"

#include <cmath>

namespace ot::relayd {

namespace {

constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnvPrime = 0x100000001b3ULL;

uint64_t fnv1a(uint64_t hash, std::string_view bytes) {
  for (const char c : bytes) {
    hash ^= static_cast<uint8_t>(c);
    hash *= kFnvPrime;
  }
  return hash;
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t originHash(std::string_view visitorKey, std::string_view origin) {
  const uint64_t hash = fnv1a(fnv1a(kFnvOffset, visitorKey), std::string_view("\0", 1));
  return splitmix64(fnv1a(hash, origin));
}

double originScore(std::string_view visitorKey, std::string_view origin, double weight) {
  if (!(weight > 0)) return 0;
  // The top 53 bits as a double in (0, 1): never 0 (ln 0) and never 1 (a zero divisor).
  const uint64_t bits = originHash(visitorKey, origin) >> 11;
  const double u = (static_cast<double>(bits) + 0.5) / 9007199254740992.0;  // 2^53
  return weight / -std::log(u);
}

size_t chooseOrigin(std::string_view visitorKey, std::span<const OriginCandidate> candidates) {
  bool anyUnheld = false;
  for (const auto& candidate : candidates) anyUnheld = anyUnheld || !candidate.held;
  size_t best = candidates.size();
  double bestScore = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (anyUnheld && candidates[i].held) continue;
    const double score = originScore(visitorKey, candidates[i].name, candidates[i].weight);
    // Ties (equal weights and hashes: practically never) go to the smaller name, the same order
    // on every machine whatever order the bridges attached in.
    if (score > bestScore || (score == bestScore && best < candidates.size() &&
                              candidates[i].name < candidates[best].name)) {
      best = i;
      bestScore = score;
    }
  }
  return best;
}

void OriginHold::linksUp(std::string_view origin, uint64_t nowMs, bool othersUp) {
  auto it = states_.find(origin);
  if (it == states_.end()) {
    states_.emplace(std::string(origin), State{true, 0, 0, false});  // never seen: not held
    return;
  }
  State& state = it->second;
  if (state.up) return;
  state.up = true;
  state.returned = othersUp;
  state.cameBackAtMs = nowMs;
}

void OriginHold::linksLost(std::string_view origin, uint64_t nowMs) {
  auto it = states_.find(origin);
  if (it == states_.end()) it = states_.emplace(std::string(origin), State{}).first;
  State& state = it->second;
  state.up = false;
  state.returned = false;
  state.lostAtMs = nowMs;
}

bool OriginHold::held(std::string_view origin, uint64_t nowMs, uint64_t holdMs) const {
  auto it = states_.find(origin);
  if (it == states_.end() || !it->second.up || !it->second.returned) return false;
  return nowMs < it->second.cameBackAtMs + holdMs;
}

void OriginHold::sweep(uint64_t nowMs, uint64_t holdMs) {
  std::erase_if(states_, [&](const auto& entry) {
    const State& state = entry.second;
    if (!state.up) return nowMs - state.lostAtMs >= kForgetLostMs;
    return false;
  });
  for (auto& [name, state] : states_) {
    if (state.up && state.returned && nowMs >= state.cameBackAtMs + holdMs) state.returned = false;
  }
}

}  // namespace ot::relayd
