// Pools of origins on controld's side (docs/pools-origins.md): derived credentials (test vectors),
// the shared secret in meta (SQLite and MariaDB, two controlds at once), the record's pool in JSON
// (old records unchanged, import checks), the record pushed to relayd, which credential may
// attach, and the API routes end to end.
#include <doctest/doctest.h>

#include <algorithm>
#include <thread>

#include "common/crypto.h"
#include "controld/admin/import_checks.h"
#include "controld/api/origin_routes.h"
#include "controld/base/origin_credentials.h"
#include "controld/relays/attach_credential.h"
#include "controld/relays/record_convert.h"
#include "controld/store/origin_secret.h"
#include "tests/controld/api_test_support.h"

namespace ot::controld {
namespace {

using testing::bearer;
using testing::checkError;
using testing::jsonType;
using testing::parseBody;
using testing::TestApi;
using testing::testDatabases;
using Json = nlohmann::ordered_json;

OriginSecret counting() {
  OriginSecret secret{};
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(i);
  return secret;
}

TEST_CASE("origins: derived credentials match the documented recipe") {
  // Computed independently:
  //   import hmac, hashlib, base64
  //   m = b'opentunnel-origin-v1\0k3xq9v2m7pta\0web-1\0' + b'0'   (then b'1')
  //   'oc_' + base64.urlsafe_b64encode(hmac.new(bytes(range(32)), m, hashlib.sha256).digest())
  //           .rstrip(b'=').decode()
  const OriginSecret secret = counting();
  CHECK(deriveOriginCredential(secret, "k3xq9v2m7pta", "web-1", 0) ==
        "oc_ryHzY8r-z1SfBMrXSf5JvJPUnotKuvlehFcu00YYnl0");
  CHECK(deriveOriginCredential(secret, "k3xq9v2m7pta", "web-1", 1) ==
        "oc_fFvPoGlAC2vAUFlba7m75FrV48doVYX5HSWcBLjr9qM");
  // Every input matters, and the separators keep ("ab","c") apart from ("a","bc").
  const std::string base = deriveOriginCredential(secret, "k3xq9v2m7pta", "web-1", 0);
  CHECK(deriveOriginCredential(secret, "k3xq9v2m7ptb", "web-1", 0) != base);
  CHECK(deriveOriginCredential(secret, "k3xq9v2m7pta", "web-2", 0) != base);
  CHECK(deriveOriginCredential(secret, "ab", "c", 0) !=
        deriveOriginCredential(secret, "a", "bc", 0));
  OriginSecret other = secret;
  other[31] ^= 1;
  CHECK(deriveOriginCredential(other, "k3xq9v2m7pta", "web-1", 0) != base);

  CHECK(originCredentialMatches(secret, "k3xq9v2m7pta", "web-1", 0, base));
  CHECK_FALSE(originCredentialMatches(secret, "k3xq9v2m7pta", "web-1", 1, base));
  CHECK_FALSE(originCredentialMatches(secret, "k3xq9v2m7pta", "web-1", 0, base + "x"));
  CHECK_FALSE(originCredentialMatches(secret, "k3xq9v2m7pta", "web-1", 0, ""));

  CHECK(isValidOriginName("web-1.eu_west"));
  CHECK(isValidOriginName(std::string(64, 'a')));
  CHECK_FALSE(isValidOriginName(std::string(65, 'a')));
  CHECK_FALSE(isValidOriginName(""));
  CHECK_FALSE(isValidOriginName("a b"));
  CHECK_FALSE(isValidOriginName("a/b"));
}

TEST_CASE("origins: the secret is made once and shared by controlds starting together") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto first = db->openMigrated();
    auto second = db->open();
    // Both start at once, neither sees a row before it inserts.
    Result<OriginSecret> a = Error{ErrorKind::kInternal, "not run"};
    Result<OriginSecret> b = Error{ErrorKind::kInternal, "not run"};
    std::thread one([&] { a = loadOriginSecret(*first); });
    std::thread two([&] { b = loadOriginSecret(*second); });
    one.join();
    two.join();
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    CHECK(*a == *b);
    CHECK(*a != OriginSecret{});
    // A restart reads the same one.
    auto again = loadOriginSecret(*first);
    REQUIRE(again.ok());
    CHECK(*again == *a);
    auto row = first->getMeta(kOriginSecretMetaKey);
    REQUIRE(row.ok());
    REQUIRE(row->has_value());
    CHECK((*row)->size() == 64);

    // A broken row is refused, not replaced.
    REQUIRE(first->compareAndSetMeta(kOriginSecretMetaKey, **row, "nothex").ok());
    CHECK_FALSE(loadOriginSecret(*first).ok());
  }
}

TunnelRecord poolRecord() {
  TunnelRecord r;
  r.id = "abc";
  r.hostname = "abc.tunnel.test";
  r.tokenSha256Hex = crypto::toHex(crypto::sha256("the-token"));
  r.createdAtMs = 5;
  return r;
}

TEST_CASE("origins: the record's pool is written only when set and round trips") {
  TunnelRecord r = poolRecord();
  const std::string before = toJson(r);
  CHECK(before.find("origins") == std::string::npos);
  CHECK(before.find("balancing") == std::string::npos);
  CHECK(before.ends_with(R"("renewAt":null,"deletedAt":null})"));

  r.origins = {{"web-1", 100}, {"web-2", 200}};
  r.credentialGeneration = 3;
  r.balancing = Balancing::kPriority;
  r.stickyHoldMs = 0;
  const std::string text = toJson(r);
  CHECK(text.ends_with(R"("deletedAt":null,"origins":[{"name":"web-1","addedAt":100},)"
                       R"({"name":"web-2","addedAt":200}],"credentialGeneration":3,)"
                       R"("balancing":"priority","stickyHoldMs":0})"));
  auto parsed = tunnelRecordFromJson(text);
  REQUIRE(parsed.ok());
  CHECK(*parsed == r);
  CHECK(toJson(*parsed) == text);

  // Each member alone.
  TunnelRecord hold = poolRecord();
  hold.stickyHoldMs = 2500;
  CHECK(toJson(hold).ends_with(R"("deletedAt":null,"stickyHoldMs":2500})"));
  CHECK(*tunnelRecordFromJson(toJson(hold)) == hold);

  CHECK_FALSE(
      tunnelRecordFromJson(R"({"id":"a","hostname":"h","tokenHash":"t","origins":{}})").ok());
  CHECK_FALSE(
      tunnelRecordFromJson(R"({"id":"a","hostname":"h","tokenHash":"t","balancing":"x"})").ok());
  CHECK_FALSE(
      tunnelRecordFromJson(R"({"id":"a","hostname":"h","tokenHash":"t","credentialGeneration":-1})")
          .ok());
}

TEST_CASE("origins: an import accepts old records and checks the pool of new ones") {
  auto rowOf = [](const TunnelRecord& record) { return BackupRow{record.id, toJson(record), 1}; };
  TunnelRecord r = poolRecord();
  CHECK(checkImportedRecord(rowOf(r), "tunnel.test").ok());
  r.origins = {{"web-1", 1}, {"web-2", 2}};
  r.credentialGeneration = 7;
  CHECK(checkImportedRecord(rowOf(r), "tunnel.test").ok());

  TunnelRecord twice = r;
  twice.origins.push_back({"web-1", 3});
  CHECK_FALSE(checkImportedRecord(rowOf(twice), "tunnel.test").ok());
  TunnelRecord badName = r;
  badName.origins.push_back({"no spaces", 3});
  CHECK_FALSE(checkImportedRecord(rowOf(badName), "tunnel.test").ok());
  TunnelRecord tooMany = poolRecord();
  for (size_t i = 0; i <= kMaxOriginsPerTunnel; ++i) {
    tooMany.origins.push_back({"o" + std::to_string(i), 1});
  }
  CHECK_FALSE(checkImportedRecord(rowOf(tooMany), "tunnel.test").ok());
  tooMany.origins.pop_back();
  CHECK(checkImportedRecord(rowOf(tooMany), "tunnel.test").ok());
  TunnelRecord longHold = poolRecord();
  longHold.stickyHoldMs = kMaxStickyHoldMs + 1;
  CHECK_FALSE(checkImportedRecord(rowOf(longHold), "tunnel.test").ok());
  // A default written out is not the server's form.
  BackupRow spelled = rowOf(poolRecord());
  spelled.recordJson.insert(spelled.recordJson.size() - 1, R"(,"credentialGeneration":0)");
  CHECK_FALSE(checkImportedRecord(spelled, "tunnel.test").ok());
}

TEST_CASE("origins: the record pushed to relayd carries credential hashes, never credentials") {
  const OriginSecret secret = counting();
  TunnelRecord r = poolRecord();
  r.origins = {{"web-1", 1}, {"web-2", 2}};
  r.credentialGeneration = 4;
  r.balancing = Balancing::kPriority;
  r.stickyHoldMs = 0;
  const cv1::TunnelRecord proto = toProtoRecord(r, 9, 0, secret);
  REQUIRE(proto.origins_size() == 2);
  CHECK(proto.origins(1).name() == "web-2");
  const auto digest = crypto::sha256(deriveOriginCredential(secret, "abc", "web-2", 4));
  CHECK(proto.origins(1).credential_sha256() == std::string(digest.begin(), digest.end()));
  CHECK(proto.balancing() == cv1::BALANCING_PRIORITY);
  CHECK(proto.sticky_hold_ms() == 1);  // 0 on the wire would mean the default
  CHECK(proto.credential_generation() == 4);
  CHECK(proto.DebugString().find("oc_") == std::string::npos);

  const cv1::TunnelRecord plain = toProtoRecord(poolRecord(), 9, 0, secret);
  CHECK(plain.origins_size() == 0);
  CHECK(plain.balancing() == cv1::BALANCING_SPREAD);
  CHECK(plain.sticky_hold_ms() == 10000);
  CHECK(toProtoRecord(r, 9, 0, std::nullopt).origins_size() == 0);
}

TEST_CASE("origins: the token attaches under any name, a credential under its own only") {
  const OriginSecret secret = counting();
  TunnelRecord r = poolRecord();
  r.origins = {{"web-1", 1}, {"web-2", 2}};
  r.credentialGeneration = 2;
  const auto hash = crypto::sha256("the-token");
  const std::string tokenHash(hash.begin(), hash.end());
  const std::string web1 = deriveOriginCredential(secret, "abc", "web-1", 2);

  CHECK(attachCredentialAccepted(r, tokenHash, "", "the-token", secret));
  CHECK(attachCredentialAccepted(r, tokenHash, "anything", "the-token", secret));
  CHECK(attachCredentialAccepted(r, tokenHash, "web-1", web1, secret));
  CHECK_FALSE(attachCredentialAccepted(r, tokenHash, "web-2", web1, secret));
  CHECK_FALSE(attachCredentialAccepted(r, tokenHash, "", web1, secret));
  CHECK_FALSE(attachCredentialAccepted(r, tokenHash, "web-1", web1, std::nullopt));
  CHECK_FALSE(attachCredentialAccepted(r, tokenHash, "web-1", "the-token-", secret));
  // Rotated: the old one stops.
  TunnelRecord rotated = r;
  rotated.credentialGeneration = 3;
  CHECK_FALSE(attachCredentialAccepted(rotated, tokenHash, "web-1", web1, secret));
  // Removed: stops too, even if added back later under the same generation it would work again.
  TunnelRecord removed = r;
  removed.origins.erase(removed.origins.begin());
  CHECK_FALSE(attachCredentialAccepted(removed, tokenHash, "web-1", web1, secret));
}

std::string originsApiPath(const std::string& id, const std::string& rest = "") {
  return "/api/tunnel/" + id + "/origins" + rest;
}

TEST_CASE("origins: the API adds, lists, removes, rotates and balances with the token only") {
  installOriginSecret(counting());
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);
    const auto tunnel = api.create();
    const auto other = api.create();
    const auto auth = bearer(tunnel.token);

    ApiResponse listed = api.call("GET", originsApiPath(tunnel.id), "", auth);
    REQUIRE(listed.status == 200);
    CHECK(parseBody(listed) == Json{{"id", tunnel.id},
                                    {"generation", 0},
                                    {"balancing", "spread"},
                                    {"stickyHoldMs", 10000},
                                    {"origins", Json::array()}});
    checkError(api.call("GET", originsApiPath(tunnel.id)), 401, "UnauthorizedError");
    checkError(api.call("GET", originsApiPath(tunnel.id), "", bearer(other.token)), 401,
               "UnauthorizedError");
    checkError(api.call("GET", originsApiPath("nosuchtunnel"), "", auth), 404, "NotFoundError");

    const auto revision = api.stored(tunnel.id).revision;
    const size_t published = api.publisher.recordsOf(tunnel.id).size();
    ApiResponse added =
        api.call("POST", originsApiPath(tunnel.id), R"({"name":"web-1"})", jsonType(auth));
    REQUIRE(added.status == 201);
    const auto addedBody = parseBody(added);
    const std::string credential = deriveOriginCredential(counting(), tunnel.id, "web-1", 0);
    CHECK(addedBody == Json{{"name", "web-1"},
                            {"addedAt", "2023-11-14T22:13:20.000Z"},
                            {"credential", credential},
                            {"direct", nullptr},
                            {"generation", 0}});
    CHECK(api.stored(tunnel.id).revision > revision);
    CHECK(api.stored(tunnel.id).record.origins ==
          std::vector<OriginEntry>{{"web-1", testing::kStartMs}});
    CHECK(api.publisher.recordsOf(tunnel.id).size() == published + 1);

    // An origin's credential is not an API token.
    checkError(api.call("GET", originsApiPath(tunnel.id), "", bearer(credential)), 401,
               "UnauthorizedError");
    checkError(api.call("POST", originsApiPath(tunnel.id), R"({"name":"web-1"})", jsonType(auth)),
               409, "ConflictError");
    checkError(api.call("POST", originsApiPath(tunnel.id), R"({"name":"a b"})", jsonType(auth)),
               400, "BadRequestError");
    checkError(api.call("POST", originsApiPath(tunnel.id), R"({"name":"rotate"})", jsonType(auth)),
               400, "BadRequestError");
    checkError(api.call("POST", originsApiPath(tunnel.id), R"({})", jsonType(auth)), 400,
               "BadRequestError");
    checkError(api.call("POST", originsApiPath(tunnel.id), R"({"name":"x"})", jsonType()), 401,
               "UnauthorizedError");

    ApiResponse rotated = api.call("POST", originsApiPath(tunnel.id, "/rotate"), "", auth);
    REQUIRE(rotated.status == 200);
    const auto rotatedBody = parseBody(rotated);
    CHECK(rotatedBody["generation"] == 1);
    REQUIRE(rotatedBody["origins"].size() == 1);
    CHECK(rotatedBody["origins"][0]["credential"] ==
          deriveOriginCredential(counting(), tunnel.id, "web-1", 1));
    CHECK(rotatedBody["origins"][0]["credential"] != credential);
    CHECK(api.stored(tunnel.id).record.credentialGeneration == 1);

    ApiResponse balanced = api.call("PUT", "/api/tunnel/" + tunnel.id + "/balancing",
                                    R"({"mode":"priority","stickyHoldMs":0})", jsonType(auth));
    REQUIRE(balanced.status == 200);
    CHECK(parseBody(balanced)["balancing"] == "priority");
    CHECK(parseBody(balanced)["stickyHoldMs"] == 0);
    balanced = api.call("PUT", "/api/tunnel/" + tunnel.id + "/balancing",
                        R"({"stickyHoldMs":2500})", jsonType(auth));
    REQUIRE(balanced.status == 200);
    CHECK(parseBody(balanced)["balancing"] == "priority");
    CHECK(api.stored(tunnel.id).record.stickyHoldMs == 2500);
    for (const char* bad : {R"({})", R"({"mode":"random"})", R"({"stickyHoldMs":600001})",
                            R"({"stickyHoldMs":-1})", R"({"stickyHoldMs":"5"})"}) {
      CAPTURE(bad);
      checkError(api.call("PUT", "/api/tunnel/" + tunnel.id + "/balancing", bad, jsonType(auth)),
                 400, "BadRequestError");
    }

    checkError(api.call("DELETE", originsApiPath(tunnel.id, "/web-2"), "", auth), 404,
               "NotFoundError");
    checkError(api.call("DELETE", originsApiPath(tunnel.id, "/web-1"), "", bearer(other.token)),
               401, "UnauthorizedError");
    ApiResponse removed = api.call("DELETE", originsApiPath(tunnel.id, "/web-1"), "", auth);
    CHECK(removed.status == 204);
    CHECK(removed.body.empty());
    CHECK(api.stored(tunnel.id).record.origins.empty());

    // The pool is full at 32.
    for (size_t i = 0; i < kMaxOriginsPerTunnel; ++i) {
      const ApiResponse one =
          api.call("POST", originsApiPath(tunnel.id),
                   Json{{"name", "o" + std::to_string(i)}}.dump(), jsonType(auth));
      REQUIRE(one.status == 201);
    }
    checkError(
        api.call("POST", originsApiPath(tunnel.id), R"({"name":"one-more"})", jsonType(auth)), 409,
        "ConflictError");

    // A deleted tunnel answers as the other routes do.
    REQUIRE(api.call("DELETE", "/api/tunnel/" + tunnel.id, "", auth).status == 200);
    checkError(api.call("GET", originsApiPath(tunnel.id), "", auth), 404, "NotFoundError");
    checkError(api.call("POST", originsApiPath(tunnel.id, "/rotate"), "", auth), 404,
               "NotFoundError");
  }
}

}  // namespace
}  // namespace ot::controld
