#include "common/route_check_auth.h"

#include <doctest/doctest.h>

#include <optional>
#include <string>

namespace ot::mesh {
namespace {

const std::string kRouteSecret = "internal-token-for-tests";
constexpr int64_t kNow = 1'800'000'000'000;
constexpr std::string_view kPath = "/internal/tunnel/abc123xyz/routes";

SignedEnvelope envelope(uint8_t fill = 3) {
  Nonce nonce{};
  nonce.fill(fill);
  return {"machine-b", "machine-a", kNow, nonce};
}

std::string sign(const SignedEnvelope& e, std::string_view method = "GET",
                 std::string_view path = kPath, std::string_view secret = kRouteSecret) {
  const auto value = buildRouteCheckAuth(secret, e, method, path);
  REQUIRE(value);
  return *value;
}

template <typename T>
std::optional<ProofError> refusal(const ProofResult<T>& result) {
  if (result) return std::nullopt;
  return result.error();
}

const LinkedSenderCheck kLinked = [](std::string_view sender) { return sender == "machine-b"; };

ProofResult<SignedEnvelope> verify(std::string_view value, NonceWindow& window,
                                   std::string_view method = "GET", std::string_view path = kPath,
                                   int64_t now = kNow) {
  return verifyRouteCheckAuth(value, method, path, kRouteSecret, "machine-a", now, kLinked, window);
}

TEST_CASE("route check auth: signed over the method and path, accepted once") {
  NonceWindow window;
  const std::string value = sign(envelope());
  std::string nonceHex;
  for (int i = 0; i < 16; ++i) nonceHex += "03";
  CHECK(value.starts_with("OPENTUNNEL-AUTH/2 machine-b machine-a 1800000000000 " + nonceHex + " "));
  CHECK(value.size() == 17 + 1 + 9 + 1 + 9 + 1 + 13 + 1 + 32 + 1 + 64);
  const Proof expected = meshMac(kRouteSecret, {"OPENTUNNEL-AUTH/2", "machine-b", "machine-a",
                                                "1800000000000", nonceHex, "GET", kPath});
  CHECK(value.substr(value.rfind(' ') + 1) == proofToHex(expected));
  const auto first = verify(value, window);
  REQUIRE(first);
  CHECK(*first == envelope());
  CHECK(refusal(verify(value, window)) == ProofError::kReplayed);
}

TEST_CASE("route check auth: another path, method, secret or purpose does not verify") {
  NonceWindow window;
  const std::string value = sign(envelope());
  CHECK(refusal(verify(value, window, "GET", "/internal/tunnel/other/routes")) ==
        ProofError::kBadProof);
  CHECK(refusal(verify(value, window, "POST")) == ProofError::kBadProof);
  CHECK(refusal(verify(sign(envelope(), "GET", kPath, "wrong"), window)) == ProofError::kBadProof);
  CHECK(refusal(verify(value, window, "get")) == ProofError::kBadRequest);
  CHECK(refusal(verify(value, window, "GET", "relative")) == ProofError::kBadRequest);
  // A forward's proof over the same envelope is not a route check's (the labels differ).
  ForwardHeader forward{envelope(), "abc123xyz", "", "", ""};
  const auto line = buildForwardHeader(kRouteSecret, forward);
  REQUIRE(line);
  const std::string forwardProof = line->substr(line->rfind(' ') + 1, 64);
  std::string spliced = value.substr(0, value.rfind(' ') + 1) + forwardProof;
  CHECK(refusal(verify(spliced, window)) == ProofError::kBadProof);
  CHECK(window.size() == 0);
  CHECK(verify(value, window));
}

TEST_CASE("route check auth: the envelope's rules are a forward's") {
  NonceWindow window;
  SignedEnvelope e = envelope();
  CHECK(refusal(verify(sign(e), window, "GET", kPath, kNow + 30'001)) == ProofError::kStale);
  CHECK(refusal(verify(sign(e), window, "GET", kPath, kNow - 30'001)) == ProofError::kFuture);
  e.receiver = "machine-c";
  CHECK(refusal(verify(sign(e), window)) == ProofError::kNotForUs);
  e = envelope();
  e.sender = "machine-z";
  CHECK(refusal(verify(sign(e), window)) == ProofError::kNotLinked);
  CHECK(window.size() == 0);
}

TEST_CASE("route check auth: malformed values") {
  NonceWindow window;
  const std::string good = sign(envelope());
  CHECK(refusal(verify("", window)) == ProofError::kBadLine);
  CHECK(refusal(verify("Bearer the-token", window)) == ProofError::kBadLine);
  CHECK(refusal(verify("OPENTUNNEL-AUTH/1 the-token", window)) == ProofError::kWrongVersion);
  CHECK(refusal(verify(good + " ", window)) == ProofError::kBadLine);
  CHECK(refusal(verify(good.substr(0, good.size() - 1), window)) == ProofError::kBadProofSyntax);
  CHECK(refusal(verify(std::string(1024, 'x'), window)) == ProofError::kLineTooLong);
  CHECK(!buildRouteCheckAuth(kRouteSecret, envelope(), "GET", "/with space"));
  CHECK(!buildRouteCheckAuth(kRouteSecret, envelope(), "", kPath));
  CHECK(signableRequest("GET", kPath));
  CHECK(!signableRequest("GET", "/" + std::string(kMaxSignedPath, 'a')));
}

}  // namespace
}  // namespace ot::mesh
