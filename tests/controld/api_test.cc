// The HTTP API's behaviour through the router's ApiHandler, on SQLite and MariaDB: creating,
// reading and deleting tunnels, authentication, request bodies, unknown paths and methods, the
// state computed from live bridges, and binding CSRs (idempotent rebinds, hostile requests).
// Limits, outages and lost races are in api_limits_test.cc.
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <sstream>
#include <thread>

#include "common/crypto.h"
#include "common/log.h"
#include "controld/issuance/csr_check.h"
#include "tests/controld/api_test_support.h"

namespace ot::controld {
namespace {

using testing::bearer;
using testing::checkError;
using testing::CreatedForTest;
using testing::headerOf;
using testing::Headers;
using testing::jsonType;
using testing::kStartMs;
using testing::parseBody;
using testing::TestApi;
using testing::testDatabases;
using testing::TestKey;
using testing::tunnelCsr;
using Json = nlohmann::ordered_json;

TEST_CASE("api: create, read and delete a tunnel") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);

    const ApiResponse created = api.call("POST", "/api/tunnel");
    REQUIRE(created.status == 201);
    CHECK(headerOf(created, "Content-Type") == "application/json");
    const Json body = parseBody(created);
    std::vector<std::string> keys;
    for (const auto& item : body.items()) keys.push_back(item.key());
    CHECK(keys == std::vector<std::string>{"id", "hostname", "token", "url"});
    const std::string id = body["id"];
    const std::string token = body["token"];
    CHECK(isValidTunnelId(id));
    CHECK(id.size() == 12);
    CHECK(body["hostname"] == id + ".tunnel.test");
    CHECK(body["url"] == "https://" + id + ".tunnel.test");
    CHECK(token.size() == 43);  // 32 random bytes, base64url without padding

    // Only the token's hash is kept.
    const StoredTunnel stored = api.stored(id);
    CHECK(stored.record.tokenSha256Hex == crypto::toHex(crypto::sha256(token)));
    CHECK(toJson(stored.record).find(token) == std::string::npos);
    CHECK(stored.record.createdAtMs == kStartMs);
    REQUIRE(api.publisher.records().size() == 1);
    CHECK(api.publisher.records()[0].record == stored.record);
    CHECK(api.publisher.records()[0].revision == stored.revision);

    api.clock.advance(1000);
    const ApiResponse read = api.call("GET", "/api/tunnel/" + id, "", bearer(token));
    REQUIRE(read.status == 200);
    CHECK(read.body == R"({"id":")" + id + R"(","hostname":")" + id +
                           R"(.tunnel.test","state":"offline","bridges":0,)"
                           R"("createdAt":"2023-11-14T22:13:20.000Z","lastConnectedAt":null,)"
                           R"("certificate":{"state":"none","notAfter":null,"error":null}})");

    const ApiResponse certificate =
        api.call("GET", "/api/tunnel/" + id + "/certificate", "", bearer(token));
    REQUIRE(certificate.status == 200);
    CHECK(certificate.body == R"({"state":"none","notAfter":null,"error":null})");

    const ApiResponse deleted = api.call("DELETE", "/api/tunnel/" + id, "", bearer(token));
    REQUIRE(deleted.status == 200);
    CHECK(deleted.body == R"({"deleted":true})");
    CHECK(api.publisher.deleted() == std::vector<std::string>{id});
    CHECK(api.stored(id).record.deletedAtMs == kStartMs + 1000);

    // Deleted tunnels are gone for every route, and their ID stays taken.
    checkError(api.call("GET", "/api/tunnel/" + id, "", bearer(token)), 404, "NotFoundError");
    checkError(api.call("GET", "/api/tunnel/" + id + "/certificate", "", bearer(token)), 404,
               "NotFoundError");
    checkError(api.call("DELETE", "/api/tunnel/" + id, "", bearer(token)), 404, "NotFoundError");
    checkError(api.bind({id, token}, tunnelCsr(id)), 404, "NotFoundError");
    checkError(api.call("POST", "/api/tunnel", R"({"id":")" + id + R"("})", jsonType()), 409,
               "ConflictError");
    CHECK(api.publisher.deleted().size() == 1);
  }
}

TEST_CASE("api: a wanted id is used when free and valid") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);

    const CreatedForTest mine = api.create("my-app");
    CHECK(mine.id == "my-app");
    CHECK(api.stored("my-app").record.hostname == "my-app.tunnel.test");

    const ApiResponse taken = api.call("POST", "/api/tunnel", R"({"id":"my-app"})", jsonType());
    checkError(taken, 409, "ConflictError");
    CHECK(parseBody(taken)["message"] == "that tunnel id is taken");

    for (const std::string& bad : std::vector<std::string>{
             R"({"id":"My-App"})", R"({"id":"-app"})", R"({"id":"app-"})", R"({"id":"a.b"})",
             R"({"id":""})", R"({"id":"a_b"})", R"({"id":")" + std::string(64, 'a') + R"("})"}) {
      CAPTURE(bad);
      checkError(api.call("POST", "/api/tunnel", bad, jsonType()), 400, "BadRequestError");
    }
    const ApiResponse notString = api.call("POST", "/api/tunnel", R"({"id":7})", jsonType());
    checkError(notString, 400, "BadRequestError");
    CHECK(parseBody(notString)["message"] == "id must be a string");

    // 63 characters is the longest label; null and unknown fields mean "no wish".
    CHECK(api.create(std::string(63, 'z')).id == std::string(63, 'z'));
    const ApiResponse nullId =
        api.call("POST", "/api/tunnel", R"({"id":null,"extra":1})", jsonType());
    CHECK(nullId.status == 201);
    CHECK(api.publisher.records().size() == 3);
  }
}

TEST_CASE("api: request bodies must be JSON objects declared as application/json") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);
    const CreatedForTest tunnel = api.create();
    const std::string certPath = "/api/tunnel/" + tunnel.id + "/certificate";
    const Headers textPlain = {{{"Content-Type", "text/plain"}}};
    const Headers form = {{{"Content-Type", "application/x-www-form-urlencoded"}}};

    // POST /api/tunnel: the body is optional.
    CHECK(api.call("POST", "/api/tunnel", "", {}).status == 201);
    CHECK(api.call("POST", "/api/tunnel", "", jsonType()).status == 201);
    CHECK(api.call("POST", "/api/tunnel", "{}", jsonType()).status == 201);
    CHECK(api.call("POST", "/api/tunnel", "{}",
                   {{{"content-type", "Application/JSON; charset=utf-8"}}})
              .status == 201);
    checkError(api.call("POST", "/api/tunnel", "{}", textPlain), 415, "UnsupportedMediaTypeError");
    checkError(api.call("POST", "/api/tunnel", "id=abc", form), 415, "UnsupportedMediaTypeError");
    checkError(api.call("POST", "/api/tunnel", "", textPlain), 415, "UnsupportedMediaTypeError");
    checkError(api.call("POST", "/api/tunnel", "{}", {}), 415, "UnsupportedMediaTypeError");
    for (const std::string bad :
         {"{", "not json", "[]", "\"id\"", "42", "null", "{\"id\":\"a\"} x"}) {
      CAPTURE(bad);
      checkError(api.call("POST", "/api/tunnel", bad, jsonType()), 400, "BadRequestError");
    }

    // PUT .../certificate: the body is required.
    const Headers auth = bearer(tunnel.token);
    checkError(api.call("PUT", certPath, "", auth), 400, "BadRequestError");
    checkError(api.call("PUT", certPath, "", jsonType(auth)), 400, "BadRequestError");
    checkError(api.call("PUT", certPath, "{", jsonType(auth)), 400, "BadRequestError");
    checkError(api.call("PUT", certPath, "{}", jsonType(auth)), 400, "BadRequestError");
    checkError(api.call("PUT", certPath, R"({"csr":5})", jsonType(auth)), 400, "BadRequestError");
    Headers textAuth = auth;
    textAuth.list.emplace_back("Content-Type", "text/plain");
    checkError(api.call("PUT", certPath, tunnelCsr(tunnel.id), textAuth), 415,
               "UnsupportedMediaTypeError");
    // Nothing above reached storage as a write.
    CHECK(api.pendingJobs() == 0);
    CHECK(api.stored(tunnel.id).record.certificate.state == CertificateState::kNone);
  }
}

TEST_CASE("api: the tunnel routes need the tunnel's bearer token") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);
    const CreatedForTest tunnel = api.create();
    const CreatedForTest other = api.create();
    const std::string path = "/api/tunnel/" + tunnel.id;

    struct Call {
      std::string method;
      std::string path;
    };
    const std::vector<Call> calls = {{"GET", path},
                                     {"DELETE", path},
                                     {"GET", path + "/certificate"},
                                     {"PUT", path + "/certificate"}};
    const std::string body = Json{{"csr", tunnelCsr(tunnel.id)}}.dump();
    const std::vector<Headers> refused = {
        {},
        {{{"Authorization", "Bearer"}}},
        {{{"Authorization", "Bearer "}}},
        {{{"Authorization", "Basic " + tunnel.token}}},
        {{{"Authorization", tunnel.token}}},
        bearer(other.token),
        bearer(tunnel.token + "x"),
        bearer(tunnel.token.substr(1)),
        bearer(crypto::toHex(crypto::sha256(tunnel.token))),  // the stored hash is not a token
    };
    for (const Call& call : calls) {
      for (const Headers& headers : refused) {
        CAPTURE(call.method);
        CAPTURE(call.path);
        CAPTURE((headers.list.empty() ? std::string("(none)") : headers.list[0].second));
        const ApiResponse response = api.call(call.method, call.path, body, jsonType(headers));
        checkError(response, 401, "UnauthorizedError");
        CHECK(headerOf(response, "WWW-Authenticate") == "Bearer");
      }
    }
    CHECK(api.pendingJobs() == 0);
    CHECK_FALSE(api.stored(tunnel.id).record.deleted());

    // The scheme is case-insensitive and surrounding blanks do not matter.
    CHECK(
        api.call("GET", path, "", {{{"authorization", "bearer  " + tunnel.token + " "}}}).status ==
        200);

    // Without a token nobody learns whether a tunnel exists; with one, an unknown tunnel is 404
    // (IDs are public hostnames anyway).
    checkError(api.call("GET", "/api/tunnel/nosuchtunnel"), 401, "UnauthorizedError");
    checkError(api.call("GET", "/api/tunnel/nosuchtunnel", "", bearer(tunnel.token)), 404,
               "NotFoundError");
    checkError(api.call("GET", "/api/tunnel/Not-A-Label", "", bearer(tunnel.token)), 404,
               "NotFoundError");
    checkError(api.call("GET", "/api/tunnel/a%2Fb", "", bearer(tunnel.token)), 404,
               "NotFoundError");
    checkError(api.call("DELETE", "/api/tunnel/nosuchtunnel", "", bearer(tunnel.token)), 404,
               "NotFoundError");
  }
}

TEST_CASE("api: unknown paths answer 404, known paths with another method 405") {
  auto db = testing::TestDatabase::sqlite();
  auto store = db->openMigrated();
  TestApi api(*store);

  for (const std::string path :
       {"/", "/api", "/api/tunnel/", "/api/tunnels", "/nope", "/api/tunnel/abc/bridge",
        "/api/tunnel/abc/certificate/x", "//api/tunnel", "/health/", "api/tunnel", ""}) {
    CAPTURE(path);
    const ApiResponse response = api.call("GET", path);
    checkError(response, 404, "NotFoundError");
    CHECK(parseBody(response)["message"] == "no such API endpoint");
  }

  struct Case {
    std::string method;
    std::string path;
    std::string allow;
  };
  for (const Case& c : std::vector<Case>{{"GET", "/api/tunnel", "POST"},
                                         {"DELETE", "/api/tunnel", "POST"},
                                         {"PATCH", "/api/tunnel/abc", "GET, DELETE"},
                                         {"POST", "/api/tunnel/abc", "GET, DELETE"},
                                         {"PUT", "/api/tunnel/abc", "GET, DELETE"},
                                         {"POST", "/api/tunnel/abc/certificate", "PUT, GET"},
                                         {"DELETE", "/api/tunnel/abc/certificate", "PUT, GET"},
                                         {"HEAD", "/health", "GET"},
                                         {"POST", "/health", "GET"},
                                         {"POST", "/openapi.json", "GET"}}) {
    CAPTURE(c.method);
    CAPTURE(c.path);
    const ApiResponse response = api.call(c.method, c.path);
    checkError(response, 405, "MethodNotAllowedError");
    CHECK(headerOf(response, "Allow") == c.allow);
  }
}

TEST_CASE("api: health and the OpenAPI document") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);
    const ApiResponse health = api.call("GET", "/health");
    CHECK(health.status == 200);
    CHECK(health.body == R"({"status":"ok"})");
    const ApiResponse openapi = api.call("GET", "/openapi.json");
    CHECK(openapi.status == 200);
    CHECK(headerOf(openapi, "Content-Type") == "application/json");
    CHECK(parseBody(openapi)["openapi"] == "3.0.3");
    CHECK(parseBody(openapi)["servers"][0]["url"] == "https://tunnel.test");
  }
}

TEST_CASE("api: a tunnel is online exactly while the registry has a live bridge for it") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);
    const CreatedForTest tunnel = api.create();
    const CreatedForTest other = api.create();
    const auto state = [&] {
      const Json body =
          parseBody(api.call("GET", "/api/tunnel/" + tunnel.id, "", bearer(tunnel.token)));
      return std::make_pair(body["state"].get<std::string>(), body["bridges"].get<int>());
    };
    const auto bridge = [](std::string bridgeId, std::string tunnelId) {
      BridgeEntry entry;
      entry.bridgeId = std::move(bridgeId);
      entry.tunnelId = std::move(tunnelId);
      entry.attachedAtMs = kStartMs;
      return entry;
    };

    CHECK(state() == std::make_pair(std::string("offline"), 0));
    api.registry.attached("relay-a#1", bridge("b-other", other.id));
    CHECK(state() == std::make_pair(std::string("offline"), 0));
    api.registry.attached("relay-a#1", bridge("b1", tunnel.id));
    CHECK(state() == std::make_pair(std::string("online"), 1));
    api.registry.replaceRelay("relay-b#1", {bridge("b2", tunnel.id), bridge("b3", tunnel.id)});
    CHECK(state() == std::make_pair(std::string("online"), 3));
    api.registry.dropRelay("relay-b#1");
    CHECK(state() == std::make_pair(std::string("online"), 1));
    api.registry.detached("relay-a#1", "b1");
    CHECK(state() == std::make_pair(std::string("offline"), 0));
    // The stored record was never touched by any of this.
    CHECK(api.stored(tunnel.id).revision == 1);
  }
}

TEST_CASE("api: binding a CSR queues one issuance; binding it again changes nothing") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TunnelServiceConfig config = testing::testConfig();
    config.issuanceRateBurst = 2;
    TestApi api(*store, config);
    const CreatedForTest tunnel = api.create();
    const std::string host = tunnel.id + ".tunnel.test";
    const std::string csr = tunnelCsr(tunnel.id, /*wildcard=*/true);
    const size_t publishedBefore = api.publisher.records().size();

    api.clock.advance(5000);
    const ApiResponse bound = api.bind(tunnel, csr);
    REQUIRE(bound.status == 202);
    CHECK(bound.body == R"({"state":"issuing","notAfter":null,"error":null})");

    const StoredTunnel stored = api.stored(tunnel.id);
    const CertificateInfo& certificate = stored.record.certificate;
    CHECK(certificate.state == CertificateState::kIssuing);
    CHECK(certificate.id.size() == 32);
    CHECK(certificate.csrPem == csr);
    CHECK(certificate.csrSha256 == checkTunnelCsr(csr, tunnel.id, "tunnel.test")->derSha256Hex);
    CHECK(certificate.identifiers == std::vector<std::string>{host, "*." + host});
    CHECK(certificate.requestedAtMs == kStartMs + 5000);
    CHECK(stored.revision == 2);

    auto job = store->getJob(certificate.id);
    REQUIRE(job.ok());
    REQUIRE(job->has_value());
    CHECK((*job)->kind == JobKind::kIssue);
    CHECK((*job)->tunnelId == tunnel.id);
    CHECK((*job)->status == JobStatus::kPending);
    CHECK((*job)->queuedAtMs == kStartMs + 5000);
    CHECK((*job)->nextRunAtMs == kStartMs + 5000);
    CHECK(api.notifier.count() == 1);
    REQUIRE(api.publisher.records().size() == publishedBefore + 1);
    CHECK(api.publisher.records().back().record == stored.record);
    CHECK(api.publisher.records().back().revision == 2);

    // The same request again, in other PEM spellings: same answer, nothing new, no rate charged
    // (the burst is 2, so three charged binds would be refused).
    const auto der = csrDerFromPem(csr);
    REQUIRE(der.ok());
    for (const std::string& again :
         {csr, testing::pemOf(*der, "CERTIFICATE REQUEST", 76, "\r\n"), csr, "\n" + csr + "\n\n"}) {
      const ApiResponse response = api.bind(tunnel, again);
      CHECK(response.status == 202);
      CHECK(response.body == bound.body);
    }
    CHECK(api.stored(tunnel.id).revision == 2);
    CHECK(api.pendingJobs() == 1);
    CHECK(api.notifier.count() == 1);
    CHECK(api.publisher.records().size() == publishedBefore + 1);

    const ApiResponse polled =
        api.call("GET", "/api/tunnel/" + tunnel.id + "/certificate", "", bearer(tunnel.token));
    CHECK(polled.status == 200);
    CHECK(polled.body == bound.body);

    // The job runner finishes it (as it would: a revisioned write of the record).
    StoredTunnel done = api.stored(tunnel.id);
    done.record.certificate.state = CertificateState::kReady;
    done.record.certificate.chainPem =
        "-----BEGIN CERTIFICATE-----\nQUJD\n-----END CERTIFICATE-----\n";
    done.record.certificate.notAfterMs = 1'707'776'000'000;  // 2024-02-12T22:13:20.000Z
    done.record.renewAtMs = 1'705'000'000'000;
    REQUIRE(store->updateTunnel(done.record, done.revision).ok());

    const std::string readyBody =
        R"({"state":"ready","chain":"-----BEGIN CERTIFICATE-----\nQUJD\n-----END CERTIFICATE-----\n",)"
        R"("notAfter":"2024-02-12T22:13:20.000Z","error":null})";
    const ApiResponse rebound = api.bind(tunnel, csr);
    CHECK(rebound.status == 200);
    CHECK(rebound.body == readyBody);
    CHECK(api.call("GET", "/api/tunnel/" + tunnel.id + "/certificate", "", bearer(tunnel.token))
              .body == readyBody);
    const Json view =
        parseBody(api.call("GET", "/api/tunnel/" + tunnel.id, "", bearer(tunnel.token)));
    CHECK(view["certificate"].dump() ==
          R"({"state":"ready","notAfter":"2024-02-12T22:13:20.000Z","error":null})");
    CHECK(api.pendingJobs() == 1);

    // A new key is a new certificate: a new job, the old chain and renewal alarm dropped.
    const ApiResponse renewed = api.bind(tunnel, tunnelCsr(tunnel.id, false, TestKey::kP384));
    CHECK(renewed.status == 202);
    const StoredTunnel after = api.stored(tunnel.id);
    CHECK(after.record.certificate.id != certificate.id);
    CHECK(after.record.certificate.identifiers == std::vector<std::string>{host});
    CHECK(after.record.certificate.chainPem.empty());
    CHECK_FALSE(after.record.renewAtMs.has_value());
    CHECK(api.pendingJobs() == 2);
    CHECK(api.notifier.count() == 2);
  }
}

TEST_CASE("api: a failed certificate stays failed for its CSR; a new CSR tries again") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);
    const CreatedForTest tunnel = api.create();
    const std::string csr = tunnelCsr(tunnel.id);
    REQUIRE(api.bind(tunnel, csr).status == 202);
    StoredTunnel failed = api.stored(tunnel.id);
    failed.record.certificate.state = CertificateState::kFailed;
    failed.record.certificate.error = "rejectedIdentifier: no";
    REQUIRE(store->updateTunnel(failed.record, failed.revision).ok());

    const ApiResponse same = api.bind(tunnel, csr);
    CHECK(same.status == 200);
    CHECK(same.body == R"({"state":"failed","notAfter":null,"error":"rejectedIdentifier: no"})");
    CHECK(api.pendingJobs() == 1);
    const ApiResponse fresh = api.bind(tunnel, tunnelCsr(tunnel.id, true));
    CHECK(fresh.status == 202);
    CHECK(fresh.body == R"({"state":"issuing","notAfter":null,"error":null})");
    CHECK(api.pendingJobs() == 2);
  }
}

TEST_CASE("api: CSRs for other names are refused with the checker's reason") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);
    const CreatedForTest tunnel = api.create("victim-not");
    const CreatedForTest attacker = api.create("attacker");

    const std::vector<std::string> hostile = {
        tunnelCsr("victim-not"),                                  // another tunnel's name
        testing::buildCsrPem(testing::hostCsr("tunnel.test")),    // the apex
        testing::buildCsrPem(testing::hostCsr("*.tunnel.test")),  // the apex wildcard
        [] {
          auto spec = testing::hostCsr("attacker.tunnel.test");
          spec.dns.push_back("victim-not.tunnel.test");  // one extra name
          return testing::buildCsrPem(spec);
        }(),
        [] {
          auto spec = testing::hostCsr("attacker.tunnel.test");
          spec.dns = {"*.tunnel.test"};  // the apex wildcard as SAN
          return testing::buildCsrPem(spec);
        }(),
        [] {
          auto spec = testing::hostCsr("attacker.tunnel.test", true);
          spec.corruptSignature = true;
          return testing::buildCsrPem(spec);
        }(),
        tunnelCsr("attacker", false, TestKey::kEd25519),
        "",
        "hello",
        "-----BEGIN CERTIFICATE-----\nQUJD\n-----END CERTIFICATE-----\n",
    };
    for (const std::string& csr : hostile) {
      CAPTURE(csr);
      const ApiResponse response = api.bind(attacker, csr);
      checkError(response, 400, "BadRequestError");
      const auto expected = checkTunnelCsr(csr, "attacker", "tunnel.test");
      REQUIRE_FALSE(expected.ok());
      CHECK(parseBody(response)["message"] == expected.error().message);
    }
    // Binding to another tunnel with its own valid CSR needs that tunnel's token.
    checkError(api.bind({"victim-not", attacker.token}, tunnelCsr("victim-not")), 401,
               "UnauthorizedError");
    CHECK(api.pendingJobs() == 0);
    CHECK(api.stored("attacker").revision == 1);
    CHECK(api.stored("victim-not").revision == 1);
    CHECK(api.notifier.count() == 0);
    (void)tunnel;
  }
}

TEST_CASE("api: concurrent binds of one CSR queue one job, and no caller sees a conflict") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);
    const CreatedForTest tunnel = api.create();
    const std::string csr = tunnelCsr(tunnel.id, true);
    std::vector<int> statuses(6, 0);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < statuses.size(); ++i) {
      threads.emplace_back([&, i] { statuses[i] = api.bind(tunnel, csr).status; });
    }
    for (auto& thread : threads) thread.join();
    for (int status : statuses) CHECK(status == 202);
    CHECK(api.pendingJobs() == 1);
    CHECK(api.notifier.count() == 1);
    CHECK(api.stored(tunnel.id).revision == 2);
  }
}

TEST_CASE("api: a different CSR while one is issuing gets 409, queues nothing, charges nothing") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TunnelServiceConfig config = testing::testConfig();
    config.issuanceRatePerDay = 5;
    config.issuanceRateBurst = 2;
    TestApi api(*store, config);
    const CreatedForTest tunnel = api.create();
    const std::string first = tunnelCsr(tunnel.id);
    REQUIRE(api.bind(tunnel, first).status == 202);
    const StoredTunnel issuing = api.stored(tunnel.id);

    // More than the budget of other CSRs: each is refused the same way, none is charged.
    for (int i = 0; i < 4; ++i) {
      const ApiResponse refused = api.bind(tunnel, tunnelCsr(tunnel.id, i % 2 == 0));
      checkError(refused, 409, "ConflictError");
      CHECK(parseBody(refused)["message"] ==
            "another certificate request (another CSR) for this tunnel is in progress; wait "
            "until it is ready or failed");
    }
    CHECK(api.stored(tunnel.id).record == issuing.record);
    CHECK(api.stored(tunnel.id).revision == issuing.revision);
    CHECK(api.pendingJobs() == 1);
    CHECK(api.notifier.count() == 1);
    // The one in progress is still free to bind again.
    CHECK(api.bind(tunnel, first).status == 202);

    // Once it is ready, a new CSR is a new request: the second (and last) of the burst.
    api.finishIssuance(tunnel.id, CertificateState::kReady);
    CHECK(api.bind(tunnel, tunnelCsr(tunnel.id, true)).status == 202);
    CHECK(api.pendingJobs() == 2);
  }
}

TEST_CASE("api: different CSRs bound at once through two services: one wins, one charge") {
  // Two TunnelServices on one database stand for two controld processes: they share no lock,
  // only the record's revision.
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TunnelServiceConfig config = testing::testConfig();
    config.issuanceRatePerDay = 5;
    config.issuanceRateBurst = 5;
    TestApi a(*store, config);
    TestApi b(*store, config);
    for (int round = 0; round < 5; ++round) {
      const CreatedForTest tunnel = a.create("race-" + std::to_string(round));
      std::vector<std::string> csrs;
      for (int i = 0; i < 8; ++i) csrs.push_back(tunnelCsr(tunnel.id, i % 2 == 0));
      std::vector<int> statuses(csrs.size(), 0);
      std::vector<std::thread> threads;
      for (size_t i = 0; i < csrs.size(); ++i) {
        threads.emplace_back(
            [&, i] { statuses[i] = (i % 2 == 0 ? a : b).bind(tunnel, csrs[i]).status; });
      }
      for (auto& thread : threads) thread.join();
      CHECK(std::count(statuses.begin(), statuses.end(), 202) == 1);
      CHECK(std::count(statuses.begin(), statuses.end(), 409) == 7);
      const size_t winner =
          static_cast<size_t>(std::find(statuses.begin(), statuses.end(), 202) - statuses.begin());
      REQUIRE(winner < csrs.size());
      CHECK(a.stored(tunnel.id).record.certificate.csrPem == csrs[winner]);
      // One charge of five: four more new certificates pass, the fifth is refused.
      for (int i = 0; i < 4; ++i) {
        a.finishIssuance(tunnel.id);
        CHECK(b.bind(tunnel, tunnelCsr(tunnel.id)).status == 202);
      }
      a.finishIssuance(tunnel.id);
      checkError(b.bind(tunnel, tunnelCsr(tunnel.id)), 429, "RateLimitedError");
    }
    CHECK(a.pendingJobs() == 5 * 5);
  }
}

TEST_CASE("api: tokens and CSRs never reach the logs") {
  std::ostringstream lines;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(lines);
  log::init({.format = log::Format::kText,
             .level = log::Level::kTrace,
             .target = "test",
             .trailingFields = {},
             .sink = sink});
  {
    auto db = testing::TestDatabase::sqlite();
    auto store = db->openMigrated();
    TunnelServiceConfig config = testing::testConfig();
    config.createRateBurst = 1;
    TestApi api(*store, config);
    const CreatedForTest tunnel = api.create();
    const std::string csr = tunnelCsr(tunnel.id, true);
    REQUIRE(api.bind(tunnel, csr).status == 202);
    CHECK(api.bind(tunnel, tunnelCsr("someone-else")).status == 400);
    CHECK(api.call("POST", "/api/tunnel").status == 429);
    CHECK(api.call("GET", "/api/tunnel/" + tunnel.id, "", bearer("wrong")).status == 401);
    REQUIRE(api.call("DELETE", "/api/tunnel/" + tunnel.id, "", bearer(tunnel.token)).status == 200);

    log::flush();
    const std::string text = lines.str();
    CHECK(text.find("tunnel created") != std::string::npos);
    CHECK(text.find("tunnel=" + tunnel.id) != std::string::npos);
    CHECK(text.find(tunnel.token) == std::string::npos);
    CHECK(text.find(crypto::toHex(crypto::sha256(tunnel.token))) == std::string::npos);
    CHECK(text.find("BEGIN CERTIFICATE REQUEST") == std::string::npos);
    const std::string base64Line = csr.substr(csr.find('\n') + 1, 40);
    CHECK(text.find(base64Line) == std::string::npos);
  }
  log::init({});
}

}  // namespace
}  // namespace ot::controld
