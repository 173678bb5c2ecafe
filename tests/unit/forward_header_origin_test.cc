// The forward header's optional origin (docs/mesh.md "The forward header", docs/pools-mesh.md):
// absent, the line is exactly the one relays before origins write; present, it is a tenth field
// before the proof, covered by the proof.
#include <doctest/doctest.h>

#include <string>
#include <string_view>

#include "common/forward_header.h"

namespace ot::mesh {
namespace {

const std::string kOriginSecret = "internal-token-for-origin-tests";
constexpr int64_t kOriginNow = 1'800'000'000'000;

ForwardHeader originSample(std::string origin, uint8_t fill = 9) {
  ForwardHeader header;
  header.envelope = {"machine-b", "machine-a", kOriginNow, {}};
  header.envelope.nonce.fill(fill);
  header.tunnelId = "abc123xyz";
  header.route = "api";
  header.visitorAddress = "192.0.2.7:51000";
  header.origin = std::move(origin);
  return header;
}

std::string originLine(const ForwardHeader& header) {
  const auto line = buildForwardHeader(kOriginSecret, header);
  REQUIRE(line);
  return line->substr(0, line->size() - 1);
}

ProofResult<ForwardHeader> verifyOrigin(std::string_view line, NonceWindow& window) {
  return verifyForwardHeader(
      line, kOriginSecret, "machine-a", kOriginNow,
      [](std::string_view sender) { return sender == "machine-b"; }, window);
}

size_t fieldsOf(std::string_view line) {
  size_t count = 1;
  for (const char c : line) count += c == ' ' ? 1 : 0;
  return count;
}

}  // namespace

TEST_CASE("forward header origin: named, it is the tenth field and reads back") {
  const ForwardHeader header = originSample("alpha");
  const std::string line = originLine(header);
  CHECK(fieldsOf(line) == 10);
  CHECK(line.find(" 192.0.2.7:51000 alpha ") != std::string::npos);
  NonceWindow window;
  const auto verified = verifyOrigin(line, window);
  REQUIRE(verified);
  CHECK(verified->origin == "alpha");
  CHECK(*verified == header);
  // The proof covers it: meshMac over the fields with the origin last.
  const std::string nonce(32, '0');
  ForwardHeader zero = originSample("alpha", 0);
  const std::string zeroLine = originLine(zero);
  const Proof expected =
      meshMac(kOriginSecret, {"OPENTUNNEL-FORWARD/2", "machine-b", "machine-a", "1800000000000",
                              nonce, "abc123xyz", "api", "192.0.2.7:51000", "alpha"});
  CHECK(zeroLine.substr(zeroLine.rfind(' ') + 1) == proofToHex(expected));
}

TEST_CASE("forward header origin: without one the line is the old nine fields") {
  const std::string line = originLine(originSample(""));
  CHECK(fieldsOf(line) == 9);
  const std::string nonce(32, '0');
  const std::string zeroLine = originLine(originSample("", 0));
  const Proof oldProof =
      meshMac(kOriginSecret, {"OPENTUNNEL-FORWARD/2", "machine-b", "machine-a", "1800000000000",
                              nonce, "abc123xyz", "api", "192.0.2.7:51000"});
  CHECK(zeroLine.substr(zeroLine.rfind(' ') + 1) == proofToHex(oldProof));
  NonceWindow window;
  const auto verified = verifyOrigin(line, window);
  REQUIRE(verified);
  CHECK(verified->origin.empty());
}

TEST_CASE("forward header origin: changed, dropped or malformed, it is refused") {
  const std::string line = originLine(originSample("alpha"));
  NonceWindow window;
  // Another origin under the same proof.
  std::string swapped = line;
  swapped.replace(swapped.find(" alpha "), 7, " bravo ");
  CHECK(verifyOrigin(swapped, window).error() == ProofError::kBadProof);
  // The origin removed: nine fields, but the proof was made over ten.
  std::string dropped = line;
  dropped.erase(dropped.find(" alpha"), 6);
  CHECK(verifyOrigin(dropped, window).error() == ProofError::kBadProof);
  // Not a name: never built, never parsed.
  CHECK_FALSE(buildForwardHeader(kOriginSecret, originSample("a/b")));
  CHECK_FALSE(buildForwardHeader(kOriginSecret, originSample(std::string(65, 'a'))));
  std::string bad = line;
  bad.replace(bad.find(" alpha "), 7, " al/ha ");
  CHECK_FALSE(parseForwardHeader(bad));
  // Eleven fields are no header.
  std::string eleven = line;
  eleven.insert(eleven.find(" alpha ") + 6, " extra");
  CHECK(parseForwardHeader(eleven).error() == ProofError::kBadLine);
  // The good one still passes after all that (no nonce was used up).
  CHECK(verifyOrigin(line, window));
}

}  // namespace ot::mesh
