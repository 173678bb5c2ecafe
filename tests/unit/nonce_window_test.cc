#include "common/nonce_window.h"

#include <doctest/doctest.h>

namespace ot::mesh {
namespace {

Nonce windowNonce(uint32_t n) {
  Nonce nonce{};
  nonce[0] = static_cast<uint8_t>(n);
  nonce[1] = static_cast<uint8_t>(n >> 8);
  nonce[2] = static_cast<uint8_t>(n >> 16);
  nonce[15] = 0x5a;
  return nonce;
}

using Admit = NonceWindow::Admit;
constexpr int64_t kT = 1'800'000'000'000;

TEST_CASE("nonce window: a nonce is admitted once") {
  NonceWindow window;
  CHECK(window.admit(windowNonce(1), kT, kT) == Admit::kFresh);
  CHECK(window.admit(windowNonce(1), kT, kT + 5) == Admit::kReplayed);
  CHECK(window.admit(windowNonce(2), kT, kT + 5) == Admit::kFresh);
  CHECK(window.size() == 2);
}

TEST_CASE("nonce window: kept while its header could be accepted, then forgotten") {
  NonceWindow window;
  // Signed 10 s in the future of this clock: acceptable until kT + 10 s + 30 s.
  CHECK(window.admit(windowNonce(1), kT + 10'000, kT) == Admit::kFresh);
  CHECK(window.admit(windowNonce(1), kT + 10'000, kT + 40'000) == Admit::kReplayed);
  CHECK(window.size() == 1);
  CHECK(window.admit(windowNonce(2), kT + 40'000, kT + 40'001) == Admit::kFresh);
  CHECK(window.size() == 1);  // nonce 1 is gone: its header is now stale everywhere
}

TEST_CASE("nonce window: full is a refusal, and room comes back as nonces expire") {
  NonceWindow window(3);
  CHECK(window.admit(windowNonce(1), kT, kT) == Admit::kFresh);
  CHECK(window.admit(windowNonce(2), kT + 1'000, kT) == Admit::kFresh);
  CHECK(window.admit(windowNonce(3), kT + 2'000, kT) == Admit::kFresh);
  CHECK(window.admit(windowNonce(4), kT, kT) == Admit::kFull);
  CHECK(window.admit(windowNonce(1), kT, kT) == Admit::kReplayed);  // a replay is still a replay
  CHECK(window.size() == 3);
  // Past nonce 1's expiry (kT + 30 s) one slot frees.
  CHECK(window.admit(windowNonce(4), kT + 30'001, kT + 30'001) == Admit::kFresh);
  CHECK(window.admit(windowNonce(5), kT + 30'001, kT + 30'001) == Admit::kFull);
  CHECK(window.capacity() == 3);
}

TEST_CASE("nonce window: after the clock steps back, what was forgotten is refused") {
  NonceWindow window;
  CHECK(window.admit(windowNonce(1), kT, kT) == Admit::kFresh);
  CHECK(window.admit(windowNonce(2), kT + 60'000, kT + 60'000) ==
        Admit::kFresh);  // forgets nonce 1
  // The clock goes back 45 s: nonce 1's header (signed at kT) would pass the time check again.
  CHECK(window.admit(windowNonce(1), kT, kT + 15'000) == Admit::kExpired);
  CHECK(admitError(Admit::kExpired) == ProofError::kStale);
  CHECK(admitError(Admit::kReplayed) == ProofError::kReplayed);
  CHECK(admitError(Admit::kFull) == ProofError::kReplayWindowFull);
}

TEST_CASE("nonce window: many nonces") {
  NonceWindow window(10'000);
  for (uint32_t i = 0; i < 10'000; ++i) {
    REQUIRE(window.admit(windowNonce(i), kT + i, kT) == Admit::kFresh);
  }
  CHECK(window.admit(windowNonce(10'000), kT, kT) == Admit::kFull);
  for (uint32_t i = 0; i < 10'000; i += 997)
    CHECK(window.admit(windowNonce(i), kT + i, kT) == Admit::kReplayed);
  // Half of them expire.
  CHECK(window.admit(windowNonce(20'000), kT + 35'000, kT + 35'000) == Admit::kFresh);
  CHECK(window.size() == 10'000 - 5'000 + 1);
}

}  // namespace
}  // namespace ot::mesh
