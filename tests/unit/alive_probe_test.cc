#include "common/alive_probe.h"

#include <doctest/doctest.h>

#include <string>

namespace ot::mesh {
namespace {

constexpr std::string_view kSecret = "a-secret-shared-by-every-machine-0123456789";
constexpr int64_t kNow = 1'800'000'000'000;

SignedEnvelope question(uint8_t nonceByte = 7) {
  SignedEnvelope envelope;
  envelope.sender = "machine-b";
  envelope.receiver = "machine-a";
  envelope.timeMs = kNow;
  envelope.nonce.fill(nonceByte);
  return envelope;
}

std::string withoutNewline(std::string line) {
  REQUIRE(line.ends_with('\n'));
  line.pop_back();
  return line;
}

TEST_CASE("alive probe: a question and its answer check out on both sides") {
  const auto line = buildAliveQuestion(kSecret, question());
  REQUIRE(line);
  CHECK(line->starts_with("OPENTUNNEL-ALIVE/2 machine-b machine-a 1800000000000 "));
  CHECK(line->find(kSecret) == std::string::npos);
  const auto asked = verifyAliveQuestion(withoutNewline(*line), kSecret, "machine-a", kNow + 5);
  REQUIRE(asked);
  CHECK(*asked == question());

  for (const AliveState state :
       {AliveState::kServing, AliveState::kControlDown, AliveState::kDraining}) {
    const std::string answer = buildAliveAnswer(kSecret, *asked, state, kNow + 6);
    CHECK(answer.find(aliveStateName(state)) != std::string::npos);
    const auto got = verifyAliveAnswer(withoutNewline(answer), kSecret, question(), kNow + 7);
    REQUIRE(got);
    CHECK(*got == state);
  }
}

TEST_CASE("alive probe: the asked side refuses what it should") {
  const std::string line = withoutNewline(*buildAliveQuestion(kSecret, question()));
  CHECK(verifyAliveQuestion(line, "another-secret-of-the-same-length-012345678", "machine-a", kNow)
            .error() == ProofError::kBadProof);
  CHECK(verifyAliveQuestion(line, kSecret, "machine-c", kNow).error() == ProofError::kNotForUs);
  CHECK(
      verifyAliveQuestion(line, kSecret, "machine-a", kNow + kSignedHeaderValidityMs + 1).error() ==
      ProofError::kStale);
  CHECK(
      verifyAliveQuestion(line, kSecret, "machine-a", kNow - kSignedHeaderValidityMs - 1).error() ==
      ProofError::kFuture);
  std::string old = line;
  old.replace(0, 18, "OPENTUNNEL-ALIVE/1");
  CHECK(verifyAliveQuestion(old, kSecret, "machine-a", kNow).error() == ProofError::kWrongVersion);
  CHECK(verifyAliveQuestion(line + " extra", kSecret, "machine-a", kNow).error() ==
        ProofError::kBadLine);
  // One field changed after signing: the proof no longer covers it.
  std::string changed = line;
  changed.replace(changed.find("1800000000000"), 13, "1800000000001");
  CHECK(verifyAliveQuestion(changed, kSecret, "machine-a", kNow).error() == ProofError::kBadProof);
  SignedEnvelope self = question();
  self.sender = "machine-a";
  const std::string fromSelf = withoutNewline(*buildAliveQuestion(kSecret, self));
  CHECK(verifyAliveQuestion(fromSelf, kSecret, "machine-a", kNow).error() ==
        ProofError::kOwnMachineId);
}

TEST_CASE("alive probe: an answer is bound to the one question it answers") {
  const std::string answer =
      withoutNewline(buildAliveAnswer(kSecret, question(7), AliveState::kServing, kNow));
  // A later question (another nonce) cannot be answered with it: a replayed "serving" would keep a
  // dead machine's tunnels.
  CHECK(verifyAliveAnswer(answer, kSecret, question(8), kNow).error() == ProofError::kBadProof);
  // Nor can another asker use it.
  SignedEnvelope otherAsker = question(7);
  otherAsker.sender = "machine-c";
  CHECK(verifyAliveAnswer(answer, kSecret, otherAsker, kNow).error() == ProofError::kNotForUs);
  // Without the secret, a state cannot be changed.
  std::string draining = answer;
  draining.replace(draining.find("serving"), 7, "draining");
  CHECK(verifyAliveAnswer(draining, kSecret, question(7), kNow).error() == ProofError::kBadProof);
  std::string unknown = answer;
  unknown.replace(unknown.find("serving"), 7, "sleeping");
  CHECK(verifyAliveAnswer(unknown, kSecret, question(7), kNow).error() == ProofError::kBadLine);
  CHECK(
      verifyAliveAnswer(answer, kSecret, question(7), kNow + kSignedHeaderValidityMs + 1).error() ==
      ProofError::kStale);
  CHECK(verifyAliveAnswer(answer, "another-secret-of-the-same-length-012345678", question(7), kNow)
            .error() == ProofError::kBadProof);
}

TEST_CASE("alive probe: a question with a malformed machine ID is not built") {
  SignedEnvelope bad = question();
  bad.receiver = "has space";
  CHECK_FALSE(buildAliveQuestion(kSecret, bad).has_value());
  bad = question();
  bad.timeMs = -1;
  CHECK_FALSE(buildAliveQuestion(kSecret, bad).has_value());
}

}  // namespace
}  // namespace ot::mesh
