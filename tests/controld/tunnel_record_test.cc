// The stored tunnel record: exact JSON (key order fixed, so rows compare byte for byte), round
// trips, malformed input, and tunnel IDs.
#include "controld/store/tunnel_record.h"

#include <doctest/doctest.h>

#include <set>

namespace ot::controld {
namespace {

TunnelRecord fullRecord() {
  TunnelRecord r;
  r.id = "k3xq9v2m7pta";
  r.hostname = "k3xq9v2m7pta.tunnel.test";
  r.tokenSha256Hex = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
  r.createdAtMs = 1'700'000'000'123;
  r.lastConnectedAtMs = 1'700'000'500'000;
  r.certificate.id = "cert-7";
  r.certificate.state = CertificateState::kReady;
  r.certificate.csrPem =
      "-----BEGIN CERTIFICATE REQUEST-----\nAAA\n-----END CERTIFICATE REQUEST-----\n";
  r.certificate.csrSha256 = "5f1e2b0c9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f";
  r.certificate.identifiers = {"k3xq9v2m7pta.tunnel.test", "*.k3xq9v2m7pta.tunnel.test"};
  r.certificate.chainPem = "-----BEGIN CERTIFICATE-----\nBBB\n-----END CERTIFICATE-----\n";
  r.certificate.notAfterMs = 1'707'776'000'000;
  r.certificate.requestedAtMs = 1'700'000'001'000;
  r.certificate.error = "";
  r.renewAtMs = 1'705'000'000'000;
  return r;
}

TEST_CASE("tunnel record: JSON has a fixed key order and exact text") {
  TunnelRecord r;
  r.id = "abc";
  r.hostname = "abc.d.test";
  r.tokenSha256Hex = "00ff";
  r.createdAtMs = 5;
  CHECK(toJson(r) ==
        R"({"id":"abc","hostname":"abc.d.test","tokenHash":"00ff","createdAt":5,)"
        R"("lastConnectedAt":null,"certificate":{"id":"","state":"none","csr":"","csrSha256":"",)"
        R"("identifiers":[],"chain":"","notAfter":0,"requestedAt":0,"error":""},)"
        R"("renewAt":null,"deletedAt":null})");

  r.certificate.state = CertificateState::kIssuing;
  r.certificate.identifiers = {"abc.d.test"};
  r.deletedAtMs = 9;
  CHECK(
      toJson(r) ==
      R"({"id":"abc","hostname":"abc.d.test","tokenHash":"00ff","createdAt":5,)"
      R"("lastConnectedAt":null,"certificate":{"id":"","state":"issuing","csr":"","csrSha256":"",)"
      R"("identifiers":["abc.d.test"],"chain":"","notAfter":0,"requestedAt":0,"error":""},)"
      R"("renewAt":null,"deletedAt":9})");
}

TEST_CASE("tunnel record: round trips through JSON, every field and state") {
  for (auto state : {CertificateState::kNone, CertificateState::kIssuing, CertificateState::kReady,
                     CertificateState::kFailed}) {
    TunnelRecord r = fullRecord();
    r.certificate.state = state;
    if (state == CertificateState::kFailed) r.certificate.error = "rejectedIdentifier: \"no\"";
    const std::string json = toJson(r);
    auto back = tunnelRecordFromJson(json);
    REQUIRE(back.ok());
    CHECK(back.value() == r);
    CHECK(toJson(back.value()) == json);
  }
  TunnelRecord deleted = fullRecord();
  deleted.deletedAtMs = 1'710'000'000'000;
  deleted.renewAtMs.reset();
  deleted.lastConnectedAtMs.reset();
  auto back = tunnelRecordFromJson(toJson(deleted));
  REQUIRE(back.ok());
  CHECK(back.value() == deleted);
  CHECK(back->deleted());
  CHECK_FALSE(back->issuing());
}

TEST_CASE("tunnel record: parsing tolerates key order and absent optional fields") {
  auto r = tunnelRecordFromJson(
      R"({"deletedAt":null,"tokenHash":"t","hostname":"h.d","id":"h","createdAt":1})");
  REQUIRE(r.ok());
  CHECK(r->id == "h");
  CHECK(r->createdAtMs == 1);
  CHECK(r->certificate.state == CertificateState::kNone);
  CHECK(r->certificate.csrSha256.empty());
  CHECK_FALSE(r->renewAtMs.has_value());
  CHECK(toJson(*r) == toJson(*tunnelRecordFromJson(toJson(*r))));
}

TEST_CASE("tunnel record: malformed JSON is refused as invalid") {
  const char* bad[] = {
      "",
      "not json",
      "[]",
      "\"string\"",
      R"({"id":"a","hostname":"a.d")",          // truncated
      R"({"hostname":"a.d","tokenHash":"t"})",  // no id
      R"({"id":7,"hostname":"a.d","tokenHash":"t"})",
      R"({"id":"a","hostname":"a.d","tokenHash":"t","createdAt":"5"})",
      R"({"id":"a","hostname":"a.d","tokenHash":"t","createdAt":1.5})",
      R"({"id":"a","hostname":"a.d","tokenHash":"t","renewAt":"soon"})",
      R"({"id":"a","hostname":"a.d","tokenHash":"t","certificate":[]})",
      R"({"id":"a","hostname":"a.d","tokenHash":"t","certificate":{"state":"bogus"}})",
      R"({"id":"a","hostname":"a.d","tokenHash":"t","certificate":{"notAfter":"x"}})",
      R"({"id":"a","hostname":"a.d","tokenHash":"t","certificate":{"identifiers":"a.d"}})",
      R"({"id":"a","hostname":"a.d","tokenHash":"t","certificate":{"identifiers":[1]}})",
  };
  for (const char* text : bad) {
    CAPTURE(text);
    auto r = tunnelRecordFromJson(text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().kind == ErrorKind::kInvalid);
  }
}

TEST_CASE("tunnel record: IDs are one lower-case DNS label") {
  CHECK(isValidTunnelId("a"));
  CHECK(isValidTunnelId("abc-123"));
  CHECK(isValidTunnelId(std::string(63, 'x')));
  CHECK_FALSE(isValidTunnelId(""));
  CHECK_FALSE(isValidTunnelId(std::string(64, 'x')));
  CHECK_FALSE(isValidTunnelId("-abc"));
  CHECK_FALSE(isValidTunnelId("abc-"));
  CHECK_FALSE(isValidTunnelId("Abc"));
  CHECK_FALSE(isValidTunnelId("a.b"));
  CHECK_FALSE(isValidTunnelId("a_b"));
  CHECK_FALSE(isValidTunnelId("a b"));
  CHECK_FALSE(isValidTunnelId(std::string("a\0b", 3)));
}

TEST_CASE("tunnel record: new IDs are valid, start with a letter and do not repeat") {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const std::string id = newTunnelId();
    CAPTURE(id);
    REQUIRE(id.size() == 12);
    CHECK(isValidTunnelId(id));
    CHECK((id[0] >= 'a' && id[0] <= 'z'));
    CHECK(id.find('-') == std::string::npos);
    seen.insert(id);
  }
  CHECK(seen.size() == 1000);
}

TEST_CASE("tunnel record: certificate state names") {
  for (auto state : {CertificateState::kNone, CertificateState::kIssuing, CertificateState::kReady,
                     CertificateState::kFailed}) {
    CHECK(parseCertificateState(certificateStateName(state)) == state);
  }
  CHECK_FALSE(parseCertificateState("READY").has_value());
  CHECK_FALSE(parseCertificateState("").has_value());
}

}  // namespace
}  // namespace ot::controld
