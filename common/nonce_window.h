// The replay window of signed headers (forwards in relayd, route checks in controld): remembers
// every accepted nonce for as long as its header could still be accepted, so a captured header is
// refused the second time. Pure; one instance per receiver, used from one thread (relayd's loop;
// controld's internal HTTP handler must hold a lock around it).
//
// A nonce signed at time t is accepted while the receiver's clock is within
// kSignedHeaderValidityMs of t, so it is kept until t + kSignedHeaderValidityMs and then dropped.
// Memory is bounded by `capacity` entries (about 90 bytes each: the set node, its bucket and the
// expiry heap entry); when every slot holds a nonce that has not expired, admit() answers kFull and
// the caller refuses the header: failing closed, since forgetting a live nonce would let its header
// replay. If the receiver's clock steps back, a header older than what the window has already
// forgotten is answered kExpired (it might be a replay of a forgotten nonce).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <queue>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/mesh_proof.h"

namespace ot::mesh {

// 131,072 live nonces: ~4,400 accepted headers a second sustained over the 30 s they live, ~12 MiB
// at the cap.
inline constexpr size_t kDefaultNonceWindowCapacity = 131'072;

class NonceWindow {
 public:
  enum class Admit : uint8_t {
    kFresh,     // never seen: now remembered until headerTimeMs + kSignedHeaderValidityMs
    kReplayed,  // seen before and still remembered
    kExpired,   // older than what the window already forgot: cannot tell, so refuse
    kFull,      // `capacity` live nonces held: refuse (the caller counts replay_window_full)
  };

  explicit NonceWindow(size_t capacity = kDefaultNonceWindowCapacity) : capacity_(capacity) {}

  // Call only for a header whose MAC checked out (so only holders of the secret can fill the
  // window) and whose time passed checkEnvelope at nowMs.
  [[nodiscard]] Admit admit(const Nonce& nonce, int64_t headerTimeMs, int64_t nowMs);

  [[nodiscard]] size_t size() const { return live_.size(); }
  [[nodiscard]] size_t capacity() const { return capacity_; }

 private:
  struct NonceHash {
    size_t operator()(const Nonce& nonce) const {
      size_t h = 0;
      std::memcpy(&h, nonce.data(), sizeof h);  // nonces are random: any 8 bytes hash well
      return h;
    }
  };
  using Expiry = std::pair<int64_t, Nonce>;

  void forgetBefore(int64_t nowMs);

  size_t capacity_;
  std::unordered_set<Nonce, NonceHash> live_;
  std::priority_queue<Expiry, std::vector<Expiry>, std::greater<>> byExpiry_;
  int64_t forgottenThroughMs_ = INT64_MIN;  // the latest expiry already dropped
};

[[nodiscard]] ProofError admitError(NonceWindow::Admit admit);

}  // namespace ot::mesh
