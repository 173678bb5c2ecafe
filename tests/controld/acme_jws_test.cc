// The JOSE pieces of the ACME client against values computed independently (fixed vectors, or
// OpenSSL's own verification), plus the small pure parsers the client uses.
#include "controld/acme/acme_jws.h"

#include <doctest/doctest.h>
#include <openssl/hmac.h>

#include "common/base64.h"
#include "controld/acme/acme_dns_check.h"
#include "controld/acme/acme_errors.h"
#include "controld/acme/acme_http.h"
#include "tests/controld/acme_test_support.h"

namespace ot::controld {
namespace {

using acme_testing::decodeText;
using acme_testing::publicKeyOf;
using acme_testing::verifyEs256;
using nlohmann::json;

// A fixed key (made once with `controld account-key`); its thumbprint and a DNS-01 value were
// computed separately with Python's hashlib over the RFC 7638 canonical form.
constexpr const char* kFixedJwk =
    R"({"crv":"P-256","d":"CNLMmGvQGnNgYGlASJBDDSfy6Su-e4dUgC1NHxY2A6k","kty":"EC",)"
    R"("x":"GXzptwRcYO2A1d4CvHgiDuejRidfXi69QXyw-GgzR5k","y":"2-71GABBPA7sy3b-TGeuS63aC7pi8Osld8DaZdAetT8"})";
constexpr const char* kFixedThumbprint = "xcj9Tp41bIqFz4eL-GxxqAzW0ckR-1_YoS5vd40dbQQ";

TEST_CASE("acme jws: the JWK thumbprint of a fixed P-256 key (RFC 7638)") {
  auto key = jws::parsePrivateJwk(kFixedJwk);
  REQUIRE(key.ok());
  auto jwk = jws::publicJwk(key->get());
  REQUIRE(jwk.ok());
  CHECK(jwk->dump() ==
        R"({"crv":"P-256","kty":"EC","x":"GXzptwRcYO2A1d4CvHgiDuejRidfXi69QXyw-GgzR5k",)"
        R"("y":"2-71GABBPA7sy3b-TGeuS63aC7pi8Osld8DaZdAetT8"})");
  CHECK(jws::thumbprint(*jwk) == kFixedThumbprint);
  // Extra members (d, alg) do not change it.
  json extended = *jwk;
  extended["alg"] = "ES256";
  CHECK(jws::thumbprint(extended) == kFixedThumbprint);
  CHECK(jws::dns01Value("evaGxfADs6pSRb2LAv9IZf17Dt3juxGJ-PCt92wr-oA", kFixedThumbprint) ==
        "p-qxCzrZ1I7ffqj8B6winoygNlEb18cGCLYoyG8kMBs");
}

TEST_CASE("acme jws: a generated key round-trips through its private JWK") {
  auto text = jws::generateAccountKeyJwk();
  REQUIRE(text.ok());
  const json parsed = json::parse(*text);
  CHECK(parsed.size() == 5);
  CHECK(parsed["kty"] == "EC");
  CHECK(parsed["crv"] == "P-256");
  auto key = jws::parsePrivateJwk(*text);
  REQUIRE(key.ok());
  auto again = jws::privateJwk(key->get());
  REQUIRE(again.ok());
  CHECK(*again == *text);
}

TEST_CASE("acme jws: unusable account keys are refused") {
  CHECK_FALSE(jws::parsePrivateJwk("not json").ok());
  CHECK_FALSE(jws::parsePrivateJwk(R"({"kty":"RSA","n":"AQAB","e":"AQAB"})").ok());
  json other = json::parse(kFixedJwk);
  other["crv"] = "P-384";
  CHECK_FALSE(jws::parsePrivateJwk(other.dump()).ok());
  // A d that belongs to another key.
  json mismatched = json::parse(kFixedJwk);
  mismatched["d"] = json::parse(*jws::generateAccountKeyJwk())["d"];
  auto refused = jws::parsePrivateJwk(mismatched.dump());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().kind == ErrorKind::kInvalid);
  json shortX = json::parse(kFixedJwk);
  shortX["x"] = "AAAA";
  CHECK_FALSE(jws::parsePrivateJwk(shortX.dump()).ok());
}

TEST_CASE("acme jws: ES256 JWS verifies with OpenSSL over the encoded parts") {
  auto key = jws::parsePrivateJwk(kFixedJwk);
  REQUIRE(key.ok());
  const json header{{"alg", "ES256"}, {"nonce", "n1"}, {"url", "https://ca/new-order"}};
  auto signedJws = jws::signJws(key->get(), header, R"({"identifiers":[]})");
  REQUIRE(signedJws.ok());
  const std::string input = (*signedJws)["protected"].get<std::string>() + "." +
                            (*signedJws)["payload"].get<std::string>();
  auto signature = base64::decodeUrl((*signedJws)["signature"].get<std::string>());
  REQUIRE(signature.has_value());
  CHECK(signature->size() == 64);
  const auto publicKey = publicKeyOf(*jws::publicJwk(key->get()));
  CHECK(verifyEs256(publicKey.get(), input, *signature));
  CHECK(json::parse(decodeText((*signedJws)["protected"])) == header);
  CHECK(decodeText((*signedJws)["payload"]) == R"({"identifiers":[]})");
  // A changed input does not verify.
  CHECK_FALSE(verifyEs256(publicKey.get(), input + "x", *signature));

  // POST-as-GET: the payload stays empty, and the signature covers "<protected>.".
  auto get = jws::signJws(key->get(), header, "");
  REQUIRE(get.ok());
  CHECK((*get)["payload"] == "");
  auto getSignature = base64::decodeUrl((*get)["signature"].get<std::string>());
  CHECK(verifyEs256(publicKey.get(), (*get)["protected"].get<std::string>() + ".", *getSignature));
}

TEST_CASE("acme jws: the external account binding is HS256 over the account JWK") {
  const std::string macKeyB64 = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W";
  auto key = jws::parsePrivateJwk(kFixedJwk);
  const json account = *jws::publicJwk(key->get());
  auto eab = jws::externalAccountBinding("kid-1", macKeyB64, account, "https://ca/new-acct");
  REQUIRE(eab.ok());
  const json header = json::parse(decodeText((*eab)["protected"]));
  CHECK(header == json{{"alg", "HS256"}, {"kid", "kid-1"}, {"url", "https://ca/new-acct"}});
  CHECK(json::parse(decodeText((*eab)["payload"])) == account);
  // The MAC, computed with OpenSSL's one-shot HMAC.
  const auto macKey = base64::decodeUrl(macKeyB64).value();
  const std::string input =
      (*eab)["protected"].get<std::string>() + "." + (*eab)["payload"].get<std::string>();
  unsigned char mac[32];
  unsigned int macLength = 0;
  HMAC(EVP_sha256(), macKey.data(), static_cast<int>(macKey.size()),
       reinterpret_cast<const unsigned char*>(input.data()), input.size(), mac, &macLength);
  CHECK(macLength == 32);
  CHECK((*eab)["signature"] == base64::encodeUrl(std::span<const uint8_t>(mac, macLength)));
  CHECK_FALSE(jws::externalAccountBinding("kid-1", "not base64!", account, "u").ok());
}

TEST_CASE("acme jws: ACME problems and statuses are classified") {
  CHECK(reasonForProblem("urn:ietf:params:acme:error:badNonce", 400) == AcmeReason::kBadNonce);
  CHECK(reasonForProblem("urn:ietf:params:acme:error:rateLimited", 429) == AcmeReason::kHttp429);
  CHECK(reasonForProblem("urn:ietf:params:acme:error:rejectedIdentifier", 400) ==
        AcmeReason::kRejected);
  CHECK(reasonForProblem("urn:ietf:params:acme:error:badCSR", 400) == AcmeReason::kRejected);
  CHECK(reasonForProblem("urn:ietf:params:acme:error:unauthorized", 403) == AcmeReason::kOther);
  CHECK(reasonForProblem("about:blank", 502) == AcmeReason::kHttp5xx);
  CHECK(acmeReasonClass(AcmeReason::kRejected) == FailureClass::kPermanent);
  CHECK(acmeReasonClass(AcmeReason::kConfig) == FailureClass::kPermanent);
  CHECK(acmeReasonClass(AcmeReason::kAuthzPending) == FailureClass::kTransient);
  CHECK(acmeReasonClass(AcmeReason::kOther) == FailureClass::kOther);
  AcmeError limited = acmeError(AcmeReason::kHttp429, "slow down");
  limited.retryAfterMs = 3000;
  const FailureDetail detail = toFailureDetail(limited);
  CHECK(detail.rateLimited);
  CHECK_FALSE(detail.pointsAtCa);
  CHECK(detail.retryAfterMs == 3000);
  CHECK(std::string(detail.reason) == "http_429");
  CHECK(toError(limited).kind == ErrorKind::kUnavailable);
  CHECK(toError(acmeError(AcmeReason::kTimeout, "")).kind == ErrorKind::kTimeout);
}

TEST_CASE("acme jws: TXT strings are read from a DNS answer") {
  // Header (1 question, 2 answers), question _a.x TXT IN, then two TXT answers pointing at it.
  const std::vector<uint8_t> message{0x12, 0x34, 0x81, 0x80, 0,   1, 0, 2,  0, 0,  0, 0,  // header
                                     2,    '_',  'a',  1,    'x', 0, 0, 16, 0, 1,  // question
                                     0xC0, 12,   0,    16,   0,   1, 0, 0,  0, 60, 0, 4,
                                     3,    'a',  'b',  'c',  // "abc"
                                     0xC0, 12,   0,    16,   0,   1, 0, 0,  0, 60, 0, 5,
                                     1,    'd',  2,    'e',  'f'};  // "d" "ef" joined
  auto texts = parseTxtAnswer(message);
  REQUIRE(texts.ok());
  CHECK(*texts == std::vector<std::string>{"abc", "def"});
  std::vector<uint8_t> truncated(message.begin(), message.end() - 2);
  CHECK_FALSE(parseTxtAnswer(truncated).ok());
}

}  // namespace
}  // namespace ot::controld
