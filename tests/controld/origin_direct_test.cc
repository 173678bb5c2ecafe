// Direct mode on controld's side (docs/pools-direct.md "API and storage"): the direct target's
// rules, its place in the stored record (old records unchanged, imports checked), storage on
// SQLite and MariaDB with the migration from schema 2, the record pushed to relayd, and the API.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "common/crypto.h"
#include "controld/admin/import_checks.h"
#include "controld/base/direct_target.h"
#include "controld/base/origin_credentials.h"
#include "controld/relays/record_convert.h"
#include "controld/store/sql_schema.h"
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

OriginSecret secretForTests() {
  OriginSecret secret{};
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(i * 7);
  return secret;
}

TEST_CASE("direct target: addresses are IPv4, bracketed IPv6 or DNS names with a port") {
  struct Good {
    const char* text;
    const char* host;
    uint16_t port;
    DirectHostKind kind;
  };
  for (const Good& good : {
           Good{"203.0.113.7:8443", "203.0.113.7", 8443, DirectHostKind::kIpv4},
           Good{"127.0.25.1:1", "127.0.25.1", 1, DirectHostKind::kIpv4},
           Good{"[2001:db8::1]:443", "2001:db8::1", 443, DirectHostKind::kIpv6},
           Good{"[::ffff:192.0.2.1]:65535", "::ffff:192.0.2.1", 65535, DirectHostKind::kIpv6},
           Good{"origin.example.com:8443", "origin.example.com", 8443, DirectHostKind::kDnsName},
           Good{"Web-1.Example.COM:80", "Web-1.Example.COM", 80, DirectHostKind::kDnsName},
           Good{"localhost:9000", "localhost", 9000, DirectHostKind::kDnsName},
           Good{"1.2.3.example:80", "1.2.3.example", 80, DirectHostKind::kDnsName},
       }) {
    CAPTURE(good.text);
    auto parsed = parseDirectAddress(good.text);
    REQUIRE_MESSAGE(parsed.ok(), (parsed.ok() ? "" : parsed.error().message));
    CHECK(*parsed == DirectAddress{good.host, good.port, good.kind});
  }
  // 255 characters in all is the most: a 250-character name of 63-character labels and ":8443".
  const std::string label(63, 'a');
  const std::string longName = label + "." + label + "." + label + "." + std::string(58, 'b');
  REQUIRE(longName.size() == 250);
  CHECK(parseDirectAddress(longName + ":8443").ok());
  CHECK_FALSE(parseDirectAddress(longName + "c:8443").ok());  // 256

  for (const char* bad : {
           "",                        // nothing
           "example.com",             // no port
           "example.com:",            // empty port
           ":8443",                   // no host
           "example.com:0",           // port 0
           "example.com:65536",       // past the last port
           "example.com:080",         // a leading zero
           "example.com:+80",         // a sign
           "example.com:80a",         // not a number
           "example.com:123456",      // too many digits
           "2001:db8::1:443",         // IPv6 without brackets
           "[2001:db8::1]",           // brackets without a port
           "[2001:db8::1]443",        // no colon after the bracket
           "[2001:db8::1:443",        // no closing bracket
           "[203.0.113.7]:443",       // IPv4 in brackets
           "[fe80::1%eth0]:443",      // a zone
           "[example.com]:443",       // a name in brackets
           "256.1.1.1:80",            // not an IPv4 address
           "1.2.3:80",                // three parts
           "01.2.3.4:80",             // a leading zero
           "1.2.3.999:80",            // all-digit last label
           "-bad.example:80",         // a label starting with '-'
           "bad-.example:80",         // ... or ending with it
           "a..b:80",                 // an empty label
           "example.com.:80",         // a trailing dot
           "under_score.example:80",  // '_' is not a host name character
           "sp ace.example:80",       // nor a space
           "http://example.com:80",   // a URL
           "example.com:80/path",     // a path
       }) {
    CAPTURE(bad);
    auto parsed = parseDirectAddress(bad);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().kind == ErrorKind::kInvalid);
    CHECK(parsed.error().message.rfind("direct.address", 0) == 0);
  }
  CHECK_FALSE(parseDirectAddress(std::string(64, 'a') + ".example:80").ok());  // a long label
}

TEST_CASE("direct target: the API's object, links 1-16 defaulting to 4") {
  auto parse = [](const char* text) { return directTargetFromJson(Json::parse(text)); };
  auto target = parse(R"({"address":"origin.example.com:8443"})");
  REQUIRE(target.ok());
  CHECK(*target == DirectTarget{"origin.example.com:8443", 4});
  target = parse(R"({"links":16,"address":"[2001:db8::1]:443"})");
  REQUIRE(target.ok());
  CHECK(*target == DirectTarget{"[2001:db8::1]:443", 16});
  CHECK(parse(R"({"address":"a.example:1","links":1})")->links == 1);

  for (const char* bad : {
           R"(null)", R"("a.example:1")", R"([])", R"({})", R"({"links":4})", R"({"address":5})",
           R"({"address":"a.example"})", R"({"address":"a.example:1","links":0})",
           R"({"address":"a.example:1","links":17})", R"({"address":"a.example:1","links":-1})",
           R"({"address":"a.example:1","links":4.5})", R"({"address":"a.example:1","links":"4"})",
           R"({"address":"a.example:1","links":18446744073709551615})",
           R"({"address":"a.example:1","link":8})",  // a misspelt member is not ignored
       }) {
    CAPTURE(bad);
    auto parsed = parse(bad);
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().kind == ErrorKind::kInvalid);
    CHECK(parsed.error().message.rfind("direct", 0) == 0);
  }

  CHECK_FALSE(checkDirectTarget({"a.example:1", 4}).has_value());
  CHECK(checkDirectTarget({"a.example:1", 0}).has_value());
  CHECK(checkDirectTarget({"a.example:1", 17}).has_value());
  CHECK(checkDirectTarget({"a.example", 4}).has_value());
}

TunnelRecord directRecord() {
  TunnelRecord r;
  r.id = "abc";
  r.hostname = "abc.tunnel.test";
  r.tokenSha256Hex = crypto::toHex(crypto::sha256("the-token"));
  r.createdAtMs = 5;
  r.origins = {{"web-1", 100}, {"web-2", 200}};
  return r;
}

TEST_CASE("direct target: the record writes it only when set, round trips, and imports check it") {
  TunnelRecord r = directRecord();
  const std::string before = toJson(r);
  CHECK(before.find("direct") == std::string::npos);
  CHECK(before.ends_with(
      R"("origins":[{"name":"web-1","addedAt":100},{"name":"web-2","addedAt":200}]})"));

  r.origins[1].direct = DirectTarget{"[2001:db8::1]:443", 4};
  const std::string text = toJson(r);
  CHECK(text.ends_with(R"("origins":[{"name":"web-1","addedAt":100},{"name":"web-2","addedAt":200,)"
                       R"("direct":{"address":"[2001:db8::1]:443","links":4}}]})"));
  auto parsed = tunnelRecordFromJson(text);
  REQUIRE(parsed.ok());
  CHECK(*parsed == r);
  CHECK(toJson(*parsed) == text);
  CHECK(*tunnelRecordFromJson(before) == directRecord());

  const std::string head = R"({"id":"a","hostname":"h","tokenHash":"t","origins":[)";
  for (const char* bad : {R"({"name":"o","addedAt":1,"direct":null}]})",
                          R"({"name":"o","addedAt":1,"direct":"a.example:1"}]})",
                          R"({"name":"o","addedAt":1,"direct":{"address":"a.example:1"}}]})",
                          R"({"name":"o","addedAt":1,"direct":{"links":4}}]})",
                          R"({"name":"o","addedAt":1,"direct":{"address":1,"links":4}}]})",
                          R"({"name":"o","addedAt":1,"direct":{"address":"a:1","links":-4}}]})",
                          R"({"name":"o","addedAt":1,"direct":{"address":"a:1","links":99}}]})"}) {
    CAPTURE(bad);
    CHECK_FALSE(tunnelRecordFromJson(head + bad).ok());
  }

  // The pool's rules, and through them an import's.
  CHECK_FALSE(checkPool(r).has_value());
  auto rowOf = [](const TunnelRecord& record) { return BackupRow{record.id, toJson(record), 1}; };
  CHECK(checkImportedRecord(rowOf(r), "tunnel.test").ok());
  TunnelRecord badAddress = r;
  badAddress.origins[0].direct = DirectTarget{"no-port.example", 4};
  REQUIRE(checkPool(badAddress).has_value());
  CHECK(checkPool(badAddress)->find("web-1") != std::string::npos);
  CHECK_FALSE(checkImportedRecord(rowOf(badAddress), "tunnel.test").ok());
  TunnelRecord badLinks = r;
  badLinks.origins[0].direct = DirectTarget{"a.example:1", 0};
  CHECK(checkPool(badLinks).has_value());
  CHECK_FALSE(checkImportedRecord(rowOf(badLinks), "tunnel.test").ok());
}

TEST_CASE("direct target: the record pushed to relayd carries address and links") {
  TunnelRecord r = directRecord();
  r.origins[0].direct = DirectTarget{"origin.example.com:8443", 7};
  const cv1::TunnelRecord proto = toProtoRecord(r, 3, 0, secretForTests());
  REQUIRE(proto.origins_size() == 2);
  CHECK(proto.origins(0).name() == "web-1");
  CHECK(proto.origins(0).direct_address() == "origin.example.com:8443");
  CHECK(proto.origins(0).direct_links() == 7);
  CHECK(proto.origins(0).credential_sha256().size() == 32);
  // An origin that dials in itself: "" and 0, reverse mode as before.
  CHECK(proto.origins(1).direct_address().empty());
  CHECK(proto.origins(1).direct_links() == 0);
}

// The tunnels table as it is at schema 2 (the tables are the same at 3): the newest row of
// schema_migrations says 2.
void markSchemaTwo(soci::session& sql) {
  sql << "DELETE FROM schema_migrations";
  sql << "INSERT INTO schema_migrations (version, applied_at) VALUES (2, 0)";
}

TEST_CASE("direct target: stored on SQLite and MariaDB; a schema 2 database migrates") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    {
      auto old = db->openMigrated();
      auto sql = db->raw();
      markSchemaTwo(*sql);
      // A record schema 2 wrote: a pool without direct targets.
      REQUIRE(old->insertTunnel(directRecord()).ok());
    }
    auto store = db->open();
    auto report = store->migrateWithReport();
    REQUIRE_MESSAGE(report.ok(), (report.ok() ? "" : report.error().message));
    CHECK(report->foundVersion == 2);
    CHECK(report->created.empty());
    CHECK(report->altered.empty());  // no table changes: the target lives in the record
    CHECK(report->recordedVersion);
    auto sql = db->raw();
    CHECK(recordedSchemaVersion(*sql, db->dialect()) == 3);

    auto loaded = store->getTunnel("abc");
    REQUIRE(loaded.ok());
    REQUIRE(loaded->has_value());
    CHECK((*loaded)->record == directRecord());
    CHECK_FALSE((*loaded)->record.origins[0].direct.has_value());

    TunnelRecord changed = (*loaded)->record;
    changed.origins[0].direct = DirectTarget{"[2001:db8::1]:443", 16};
    auto revision = store->updateTunnel(changed, (*loaded)->revision);
    REQUIRE(revision.ok());
    CHECK(*revision > (*loaded)->revision);
    auto again = db->open()->getTunnel("abc");
    REQUIRE(again.ok());
    REQUIRE(again->has_value());
    CHECK((*again)->record == changed);
    std::string stored;
    *sql << "SELECT record FROM tunnels WHERE id = 'abc'", soci::into(stored);
    CHECK(stored.find(R"("direct":{"address":"[2001:db8::1]:443","links":16})") !=
          std::string::npos);
    // Found by the query a relay session's start uses; a tunnel without a target is not.
    TunnelRecord plain = directRecord();
    plain.id = "abd";
    plain.hostname = "abd.tunnel.test";
    plain.tokenSha256Hex = crypto::toHex(crypto::sha256("another-token"));
    REQUIRE(store->insertTunnel(plain).ok());
    auto direct = store->directTunnels("", 10);
    REQUIRE(direct.ok());
    REQUIRE(direct->size() == 1);
    CHECK(direct->front().record.id == "abc");
    CHECK(store->directTunnels("abc", 10)->empty());

    // Turned off again: the row holds no trace of it.
    changed.origins[0].direct.reset();
    REQUIRE(store->updateTunnel(changed, *revision).ok());
    *sql << "SELECT record FROM tunnels WHERE id = 'abc'", soci::into(stored);
    CHECK(stored == toJson(directRecord()));

    // Another controld starting afterwards finds nothing to do.
    auto current = db->open()->migrateWithReport();
    REQUIRE(current.ok());
    CHECK(current->foundVersion == 3);
    CHECK_FALSE(current->recordedVersion);
  }
}

std::string originsPath(const std::string& id, const std::string& rest = "") {
  return "/api/tunnel/" + id + "/origins" + rest;
}

TEST_CASE("direct target: the API adds with it, sets, replaces, lists and turns it off") {
  installOriginSecret(secretForTests());
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);
    const auto tunnel = api.create();
    const auto other = api.create();
    const auto auth = bearer(tunnel.token);

    // Added with a target (links defaulting to 4), and without one.
    ApiResponse added = api.call(
        "POST", originsPath(tunnel.id),
        R"({"name":"web-1","direct":{"address":"origin.example.com:8443"}})", jsonType(auth));
    REQUIRE(added.status == 201);
    CHECK(parseBody(added)["direct"] == Json{{"address", "origin.example.com:8443"}, {"links", 4}});
    added = api.call("POST", originsPath(tunnel.id), R"({"name":"web-2","direct":null})",
                     jsonType(auth));
    REQUIRE(added.status == 201);
    CHECK(parseBody(added)["direct"].is_null());
    CHECK(api.stored(tunnel.id).record.origins ==
          std::vector<OriginEntry>{
              {"web-1", testing::kStartMs, DirectTarget{"origin.example.com:8443", 4}},
              {"web-2", testing::kStartMs, std::nullopt}});
    for (const char* bad : {R"({"name":"web-3","direct":{"address":"origin.example.com"}})",
                            R"({"name":"web-3","direct":{"address":"a.example:1","links":17}})",
                            R"({"name":"web-3","direct":"a.example:1"})"}) {
      CAPTURE(bad);
      checkError(api.call("POST", originsPath(tunnel.id), bad, jsonType(auth)), 400,
                 "BadRequestError");
    }
    CHECK(api.stored(tunnel.id).record.origins.size() == 2);  // nothing added by a refusal

    ApiResponse listed = api.call("GET", originsPath(tunnel.id), "", auth);
    REQUIRE(listed.status == 200);
    Json origins = parseBody(listed)["origins"];
    REQUIRE(origins.size() == 2);
    CHECK(origins[0]["direct"] == Json{{"address", "origin.example.com:8443"}, {"links", 4}});
    CHECK(origins[1].contains("direct"));
    CHECK(origins[1]["direct"].is_null());

    // PUT sets, and replaces; each write is a new revision pushed to the relays.
    const auto revision = api.stored(tunnel.id).revision;
    const size_t published = api.publisher.recordsOf(tunnel.id).size();
    ApiResponse set = api.call("PUT", originsPath(tunnel.id, "/web-2/direct"),
                               R"({"address":"[2001:db8::7]:443","links":2})", jsonType(auth));
    REQUIRE(set.status == 200);
    CHECK(parseBody(set) ==
          Json{{"name", "web-2"},
               {"addedAt", "2023-11-14T22:13:20.000Z"},
               {"credential", deriveOriginCredential(secretForTests(), tunnel.id, "web-2", 0)},
               {"direct", {{"address", "[2001:db8::7]:443"}, {"links", 2}}}});
    CHECK(api.stored(tunnel.id).revision > revision);
    REQUIRE(api.publisher.recordsOf(tunnel.id).size() == published + 1);
    const StoredTunnel pushed = api.publisher.recordsOf(tunnel.id).back();
    const cv1::TunnelRecord proto = toProtoRecord(pushed.record, pushed.revision, 0);
    REQUIRE(proto.origins_size() == 2);
    CHECK(proto.origins(1).direct_address() == "[2001:db8::7]:443");
    CHECK(proto.origins(1).direct_links() == 2);

    set = api.call("PUT", originsPath(tunnel.id, "/web-1/direct"),
                   R"({"address":"203.0.113.9:9443","links":16})", jsonType(auth));
    REQUIRE(set.status == 200);
    CHECK(api.stored(tunnel.id).record.origins[0].direct ==
          std::optional<DirectTarget>(DirectTarget{"203.0.113.9:9443", 16}));

    for (const char* bad :
         {R"({})", R"({"address":"203.0.113.9"})", R"({"address":"203.0.113.9:9443","links":0})",
          R"({"address":"203.0.113.9:9443","links":17})", R"({"address":"2001:db8::7:443"})",
          R"({"address":"a b:1"})", R"({"address":"a.example:1","extra":true})", R"([1])"}) {
      CAPTURE(bad);
      checkError(api.call("PUT", originsPath(tunnel.id, "/web-1/direct"), bad, jsonType(auth)), 400,
                 "BadRequestError");
    }
    CHECK(api.stored(tunnel.id).record.origins[0].direct->address == "203.0.113.9:9443");
    checkError(api.call("PUT", originsPath(tunnel.id, "/web-9/direct"),
                        R"({"address":"a.example:1"})", jsonType(auth)),
               404, "NotFoundError");
    checkError(api.call("PUT", originsPath("nosuchtunnel", "/web-1/direct"),
                        R"({"address":"a.example:1"})", jsonType(auth)),
               404, "NotFoundError");
    checkError(api.call("PUT", originsPath(tunnel.id, "/web-1/direct"),
                        R"({"address":"a.example:1"})", jsonType(bearer(other.token))),
               401, "UnauthorizedError");
    checkError(api.call("PUT", originsPath(tunnel.id, "/web-1/direct"),
                        R"({"address":"a.example:1"})", jsonType()),
               401, "UnauthorizedError");

    // DELETE turns it off; again is 204 without a new revision.
    checkError(api.call("DELETE", originsPath(tunnel.id, "/web-1/direct"), "", bearer(other.token)),
               401, "UnauthorizedError");
    ApiResponse off = api.call("DELETE", originsPath(tunnel.id, "/web-1/direct"), "", auth);
    CHECK(off.status == 204);
    CHECK(off.body.empty());
    CHECK_FALSE(api.stored(tunnel.id).record.origins[0].direct.has_value());
    CHECK(toProtoRecord(api.publisher.recordsOf(tunnel.id).back().record, 1, 0)
              .origins(0)
              .direct_address()
              .empty());
    const auto offRevision = api.stored(tunnel.id).revision;
    CHECK(api.call("DELETE", originsPath(tunnel.id, "/web-1/direct"), "", auth).status == 204);
    CHECK(api.stored(tunnel.id).revision == offRevision);
    checkError(api.call("DELETE", originsPath(tunnel.id, "/web-9/direct"), "", auth), 404,
               "NotFoundError");
    listed = api.call("GET", originsPath(tunnel.id), "", auth);
    origins = parseBody(listed)["origins"];
    CHECK(origins[0]["direct"].is_null());
    CHECK(origins[1]["direct"] == Json{{"address", "[2001:db8::7]:443"}, {"links", 2}});

    // An origin named "direct" is an origin like any other.
    REQUIRE(
        api.call("POST", originsPath(tunnel.id), R"({"name":"direct"})", jsonType(auth)).status ==
        201);
    CHECK(api.call("PUT", originsPath(tunnel.id, "/direct/direct"), R"({"address":"a.example:1"})",
                   jsonType(auth))
              .status == 200);
    CHECK(api.call("DELETE", originsPath(tunnel.id, "/direct"), "", auth).status == 204);

    // Removing the origin removes its target with it.
    CHECK(api.call("DELETE", originsPath(tunnel.id, "/web-2"), "", auth).status == 204);
    CHECK(api.stored(tunnel.id).record.origins ==
          std::vector<OriginEntry>{{"web-1", testing::kStartMs, std::nullopt}});
  }
}

}  // namespace
}  // namespace ot::controld
