// The sticky choice of a tunnel's origin for a visitor (docs/pools-choice.md). Pure logic, loop
// thread only, time passed in.
//
// Weighted rendezvous hashing: every origin with a usable link gets a score from a hash of
// (visitor key, origin name) and the highest wins, so a visitor stays on its origin while that
// origin has links, and an origin's departure moves only its own visitors. The hash is a fixed
// function (not std::hash) so every relay, on every run, gives the same visitor the same origin.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

namespace ot::relayd {

// 64 bits from (visitor key, origin name): FNV-1a over both (a 0 byte between them, so "ab"+"c"
// and "a"+"bc" differ) and a splitmix64 finalizer to spread FNV's weak low bits.
[[nodiscard]] uint64_t originHash(std::string_view visitorKey, std::string_view origin);

// weight / -ln(u), u in (0,1) from originHash: the rendezvous score. Weight <= 0 scores 0.
[[nodiscard]] double originScore(std::string_view visitorKey, std::string_view origin,
                                 double weight);

struct OriginCandidate {
  std::string_view name;
  double weight = 1.0;
  bool held = false;  // came back recently: chosen only when no unheld candidate exists
};

// The index of the chosen candidate, or candidates.size() when there is none. Held candidates
// take part only when every candidate is held.
[[nodiscard]] size_t chooseOrigin(std::string_view visitorKey,
                                  std::span<const OriginCandidate> candidates);

// Which origins of one tunnel are held: an origin that lost its last link and has one again is
// held for the hold time after it came back, so a flapping origin does not pull its visitors back
// and forth. Lost origins are remembered for kForgetLostMs; one never seen (or forgotten) is not
// held, so a fresh relay or a new origin takes its share at once.
class OriginHold {
 public:
  static constexpr uint64_t kForgetLostMs = 10 * 60'000;

  // The origin has links now (`up`) or none left. `othersUp`: another origin of the tunnel has
  // links. An origin coming back while no other has links takes nobody's visitors: not held
  // (otherwise, after every origin dropped at once, the ones back first would hand visitors to
  // the later ones as their holds end one after another).
  void linksUp(std::string_view origin, uint64_t nowMs, bool othersUp = true);
  void linksLost(std::string_view origin, uint64_t nowMs);
  [[nodiscard]] bool held(std::string_view origin, uint64_t nowMs, uint64_t holdMs) const;
  // Forgets origins lost for kForgetLostMs and holds that ended; cheap, run now and then.
  void sweep(uint64_t nowMs, uint64_t holdMs);
  [[nodiscard]] bool empty() const { return states_.empty(); }

 private:
  struct State {
    bool up = false;
    uint64_t lostAtMs = 0;      // when !up
    uint64_t cameBackAtMs = 0;  // when up after a loss; 0: never lost (not held)
    bool returned = false;
  };
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view name) const { return std::hash<std::string_view>{}(name); }
  };
  std::unordered_map<std::string, State, NameHash, std::equal_to<>> states_;
};

}  // namespace ot::relayd
