// POST /api/tunnel/{id}/reset (docs/api.md, docs/pools-reset.md) through the router, with the
// reset itself a recording stand-in: the token first (401, 404 before anything is reset), the
// outcome's JSON, and at most one reset per tunnel per second (429 with Retry-After), each
// tunnel on its own budget.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/controld/api_test_support.h"

namespace ot::controld {
namespace {

using testing::parseBody;
using testing::TestApi;
using testing::testDatabases;

struct ResetRouter {
  std::vector<std::string> resets;  // tunnels the stand-in was asked to reset
  ApiRouter router;

  explicit ResetRouter(TestApi& api)
      : router(buildApiRouter(api.service(), {}, {}, {},
                              ResetApi{[this](const std::string& id) {
                                         resets.push_back(id);
                                         TunnelResetOutcome outcome;
                                         outcome.tunnelId = id;
                                         outcome.bridgesHere = 2;
                                         outcome.relays = 1;
                                         outcome.peersTold = 1;
                                         outcome.machines = {{"m-a", true, true, 2},
                                                             {"m-b", false, true, 3},
                                                             {"m-c", false, false, 1}};
                                         return outcome;
                                       },
                                       api.clock.clock(), 1000})) {}

  ApiResponse post(const std::string& id, const std::string& token) const {
    ApiRequest request;
    request.method = "POST";
    request.path = "/api/tunnel/" + id + "/reset";
    if (!token.empty()) request.headers.emplace_back("Authorization", "Bearer " + token);
    request.clientAddress = testing::kClient;
    return router.handle(request);
  }
};

}  // namespace

TEST_CASE("reset api: the token first, the outcome per machine, one reset per second") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);
    const auto tunnel = api.create();
    const auto other = api.create();
    ResetRouter reset(api);

    CHECK(reset.post(tunnel.id, "").status == 401);
    CHECK(reset.post(tunnel.id, other.token).status == 401);
    CHECK(reset.post("nosuchtunnel", tunnel.token).status == 404);
    CHECK(reset.resets.empty());

    const ApiResponse done = reset.post(tunnel.id, tunnel.token);
    REQUIRE(done.status == 200);
    const auto body = parseBody(done);
    CHECK(body["id"] == tunnel.id);
    CHECK(body["bridgesClosedHere"] == 2);
    CHECK(body["relaysHere"] == 1);
    CHECK(body["peersTold"] == 1);
    REQUIRE(body["machines"].size() == 3);
    CHECK(
        body["machines"][0] ==
        nlohmann::ordered_json{{"machine", "m-a"}, {"here", true}, {"told", true}, {"bridges", 2}});
    CHECK(body["machines"][2]["told"] == false);
    CHECK(reset.resets == std::vector<std::string>{tunnel.id});

    // Within the second: refused, nothing reset; another tunnel has its own budget.
    api.clock.advance(400);
    const ApiResponse again = reset.post(tunnel.id, tunnel.token);
    CHECK(again.status == 429);
    CHECK(parseBody(again)["_tag"] == "RateLimitedError");
    bool retryAfter = false;
    for (const auto& [name, value] : again.headers)
      retryAfter |= name == "Retry-After" && value == "1";
    CHECK(retryAfter);
    CHECK(reset.post(other.id, other.token).status == 200);
    CHECK(reset.resets.size() == 2);

    // A second after the first: allowed again.
    api.clock.advance(600);
    CHECK(reset.post(tunnel.id, tunnel.token).status == 200);
    CHECK(reset.resets.size() == 3);
  }
}

TEST_CASE("reset api: the route is documented in /openapi.json") {
  for (const auto& db : testDatabases()) {
    auto store = db->openMigrated();
    TestApi api(*store);
    ResetRouter reset(api);
    ApiRequest request;
    request.method = "GET";
    request.path = "/openapi.json";
    const auto document = parseBody(reset.router.handle(request));
    const auto& operation = document["paths"]["/api/tunnel/{id}/reset"]["post"];
    CHECK(operation["operationId"] == "resetTunnel");
    CHECK(operation["responses"].contains("429"));
    CHECK(document["components"]["schemas"].contains("ResetOutcome"));
    break;  // one database is enough for the document
  }
}

}  // namespace ot::controld
