#include "common/forward_header.h"

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <string_view>

namespace ot::mesh {
namespace {

const std::string kSecret = "internal-token-for-tests";
constexpr int64_t kNow = 1'800'000'000'000;

Nonce nonceOf(uint8_t fill) {
  Nonce nonce{};
  nonce.fill(fill);
  return nonce;
}

ForwardHeader sample(uint8_t nonce = 7) {
  return {
      {"machine-b", "machine-a", kNow, nonceOf(nonce)}, "abc123xyz", "api", "192.0.2.7:51000", ""};
}

std::string lineOf(const ForwardHeader& header, std::string_view secret = kSecret) {
  const auto line = buildForwardHeader(secret, header);
  REQUIRE(line);
  REQUIRE(line->back() == '\n');
  return line->substr(0, line->size() - 1);
}

std::string repeated(std::string_view text, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += text;
  return out;
}

const std::string kNonce7 = repeated("07", 16);

template <typename T>
std::optional<ProofError> refusal(const ProofResult<T>& result) {
  if (result) return std::nullopt;
  return result.error();
}

const LinkedSenderCheck kLinked = [](std::string_view sender) { return sender == "machine-b"; };

ProofResult<ForwardHeader> verify(std::string_view line, NonceWindow& window, int64_t now = kNow) {
  return verifyForwardHeader(line, kSecret, "machine-a", now, kLinked, window);
}

TEST_CASE("forward header: the line as sent, and read back") {
  const ForwardHeader header = sample();
  const std::string line = lineOf(header);
  CHECK(
      line.starts_with("OPENTUNNEL-FORWARD/2 machine-b machine-a 1800000000000 " + kNonce7 + " "));
  CHECK(line.find(" abc123xyz api 192.0.2.7:51000 ") != std::string::npos);
  CHECK(line.find(kSecret) == std::string::npos);
  const auto parsed = parseForwardHeader(line);
  REQUIRE(parsed);
  CHECK(parsed->header == header);
}

TEST_CASE("forward header: the proof is meshMac over the label and the fields as on the line") {
  ForwardHeader header = sample();
  header.route = "";
  const std::string line = lineOf(header);
  const Proof expected =
      meshMac(kSecret, {"OPENTUNNEL-FORWARD/2", "machine-b", "machine-a", "1800000000000", kNonce7,
                        "abc123xyz", "-", "192.0.2.7:51000"});
  CHECK(line.substr(line.rfind(' ') + 1) == proofToHex(expected));
}

TEST_CASE("forward header: the bare hostname, an unknown address and IPv6 visitors") {
  NonceWindow window;
  ForwardHeader header = sample();
  header.route = "";
  header.visitorAddress = "";
  std::string line = lineOf(header);
  CHECK(line.find(" abc123xyz - - ") != std::string::npos);
  auto verified = verify(line, window);
  REQUIRE(verified);
  CHECK(verified->route.empty());
  CHECK(verified->visitorAddress.empty());

  header = sample(8);
  header.visitorAddress = "[2001:db8::1]:443";
  verified = verify(lineOf(header), window);
  REQUIRE(verified);
  CHECK(*verified == header);
}

TEST_CASE("forward header: a good header is accepted once") {
  NonceWindow window;
  const std::string line = lineOf(sample());
  const auto first = verify(line, window);
  REQUIRE(first);
  CHECK(*first == sample());
  const auto again = verify(line, window, kNow + 1'000);
  REQUIRE(!again);
  CHECK(again.error() == ProofError::kReplayed);
}

TEST_CASE("forward header: signed within 30 s of the receiver's clock, either way") {
  NonceWindow window;
  const std::string line = lineOf(sample());
  CHECK(refusal(verify(line, window, kNow - 30'001)) == ProofError::kFuture);
  CHECK(refusal(verify(line, window, kNow + 30'001)) == ProofError::kStale);
  CHECK(verify(line, window, kNow + 30'000));
  CHECK(verify(lineOf(sample(9)), window, kNow - 30'000));
  CHECK(window.size() == 2);
}

TEST_CASE("forward header: addressed to this machine, from a linked machine other than itself") {
  NonceWindow window;
  ForwardHeader header = sample();
  header.envelope.receiver = "machine-c";
  CHECK(refusal(verify(lineOf(header), window)) == ProofError::kNotForUs);
  header = sample();
  header.envelope.sender = "machine-a";
  CHECK(refusal(verify(lineOf(header), window)) == ProofError::kOwnMachineId);
  header = sample();
  header.envelope.sender = "machine-x";
  CHECK(refusal(verify(lineOf(header), window)) == ProofError::kNotLinked);
  // None of the refusals used up the nonce.
  CHECK(window.size() == 0);
  CHECK(verify(lineOf(sample()), window));
}

TEST_CASE("forward header: the proof covers every field and needs the secret") {
  NonceWindow window;
  const std::string line = lineOf(sample());
  auto tampered = [&](std::string_view from, std::string_view to) {
    std::string copy = line;
    copy.replace(copy.find(from), from.size(), to);
    return copy;
  };
  CHECK(refusal(verify(tampered(" api ", " www "), window)) == ProofError::kBadProof);
  CHECK(refusal(verify(tampered(" api ", " - "), window)) == ProofError::kBadProof);
  CHECK(refusal(verify(tampered("abc123xyz", "abc123xyy"), window)) == ProofError::kBadProof);
  CHECK(refusal(verify(tampered(":51000", ":51001"), window)) == ProofError::kBadProof);
  CHECK(refusal(verify(tampered("1800000000000", "1800000000001"), window)) ==
        ProofError::kBadProof);
  CHECK(refusal(verify(lineOf(sample(), "another-secret"), window)) == ProofError::kBadProof);
  // A forged header does not burn the nonce of the real one.
  CHECK(window.size() == 0);
  CHECK(verify(line, window));
}

TEST_CASE("forward header: malformed lines are refused with their reason") {
  const std::string good = lineOf(sample());
  auto replaced = [&](std::string_view from, std::string_view to) {
    std::string copy = good;
    copy.replace(copy.find(from), from.size(), to);
    return copy;
  };
  const std::string proof = good.substr(good.rfind(' ') + 1);
  struct Case {
    std::string line;
    ProofError error;
  };
  const Case cases[] = {
      {replaced("FORWARD/2", "FORWARD/1"), ProofError::kWrongVersion},
      {"OPENTUNNEL-FORWARD secret abc123xyz", ProofError::kWrongVersion},
      {"GET / HTTP/1.1", ProofError::kBadLine},
      {good.substr(0, good.rfind(' ')), ProofError::kBadLine},
      // Ten fields: the proof's place is the optional origin's, so "extra" is read as the proof.
      {good + " extra", ProofError::kBadProofSyntax},
      {good + " extra more", ProofError::kBadLine},
      {replaced(" api ", "  api "), ProofError::kBadLine},
      {replaced(" api ", " api\t"), ProofError::kBadLine},
      {replaced("machine-b", "machine/b"), ProofError::kBadMachineId},
      {replaced("1800000000000", "01800000000000"), ProofError::kBadTime},
      {replaced("1800000000000", "-1800000000000"), ProofError::kBadTime},
      {replaced("1800000000000", "1800000000000000000"), ProofError::kBadTime},
      {replaced(kNonce7, "G" + kNonce7.substr(1)), ProofError::kBadNonce},
      {replaced(kNonce7, kNonce7 + "a"), ProofError::kBadNonce},
      {replaced("abc123xyz", "ABC123xyz"), ProofError::kBadTunnel},
      {replaced("abc123xyz", "abc-"), ProofError::kBadTunnel},
      {replaced(" api ", " a.b "), ProofError::kBadRoute},
      {replaced(" api ", " -api "), ProofError::kBadRoute},
      {replaced("192.0.2.7:51000", "192.0.2.7"), ProofError::kBadAddress},
      {replaced("192.0.2.7:51000", "192.0.2.7:0"), ProofError::kBadAddress},
      {replaced("192.0.2.7:51000", "2001:db8::1:443"), ProofError::kBadAddress},
      {replaced(proof, proof.substr(1)), ProofError::kBadProofSyntax},
      {replaced(proof, "X" + proof.substr(1)), ProofError::kBadProofSyntax},
  };
  for (const auto& c : cases) {
    CAPTURE(c.line);
    const auto parsed = parseForwardHeader(c.line);
    REQUIRE(!parsed);
    CHECK(parsed.error() == c.error);
  }
}

TEST_CASE("forward header: the sender cannot build what the receiver would refuse") {
  ForwardHeader header = sample();
  header.route = "Bad";
  CHECK(!buildForwardHeader(kSecret, header));
  header = sample();
  header.visitorAddress = "nowhere";
  CHECK(!buildForwardHeader(kSecret, header));
  header = sample();
  header.tunnelId = "";
  CHECK(!buildForwardHeader(kSecret, header));
  header = sample();
  header.envelope.sender = "two words";
  CHECK(!buildForwardHeader(kSecret, header));
  header = sample();
  header.envelope.timeMs = -1;
  CHECK(!buildForwardHeader(kSecret, header));
}

TEST_CASE("forward header: a full replay window refuses rather than forgets") {
  NonceWindow window(1);
  CHECK(verify(lineOf(sample(1)), window));
  const auto refused = verify(lineOf(sample(2)), window);
  REQUIRE(!refused);
  CHECK(refused.error() == ProofError::kReplayWindowFull);
  CHECK(proofErrorName(refused.error()) == "replay_window_full");
}

}  // namespace
}  // namespace ot::mesh
