#include "client/api_client.h"

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/unit/canned_http_server.h"

namespace {

using namespace ot::client;
using ot::testing::answer;
using ot::testing::CannedServer;
using std::chrono::milliseconds;

struct Client {
  explicit Client(uint16_t port) {
    ApiClientOptions options;
    std::string error;
    options.server = *parseServerUrl("http://127.0.0.1:" + std::to_string(port), &error);
    options.sleep = [this](milliseconds wait) {
      waits.push_back(wait);
      return true;
    };
    api = std::make_unique<ApiClient>(options);
  }
  std::vector<milliseconds> waits;
  std::unique_ptr<ApiClient> api;
};

}  // namespace

TEST_CASE("client api: create sends JSON with the user agent and reads the answer") {
  CannedServer server({answer(
      201, R"({"id":"myid","hostname":"myid.tunnels.test","token":"tk_x","url":"https://u"})")});
  Client client(server.port());
  auto created = client.api->createTunnel(std::string("myid"));
  REQUIRE(created.ok());
  CHECK(created->id == "myid");
  CHECK(created->hostname == "myid.tunnels.test");
  CHECK(created->token == "tk_x");
  CHECK(created->url == "https://u");
  const auto requests = server.requests();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].starts_with("POST /api/tunnel HTTP/1.1\r\n"));
  CHECK(requests[0].find("User-Agent: otunnel/0.1.0\r\n") != std::string::npos);
  CHECK(requests[0].find("Content-Type: application/json\r\n") != std::string::npos);
  CHECK(requests[0].find("Authorization") == std::string::npos);
  CHECK(requests[0].ends_with("\r\n\r\n{\"id\":\"myid\"}"));
  CHECK(client.waits.empty());
}

TEST_CASE("client api: errors carry the status, _tag and message") {
  CannedServer server({answer(404, R"({"_tag":"NotFoundError","message":"no tunnel myid"})"),
                       answer(401, "<html>nope</html>")});
  Client client(server.port());
  auto missing = client.api->getTunnel("myid", "tk_x");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().status == 404);
  CHECK(missing.error().tag == "NotFoundError");
  CHECK(missing.error().message == "no tunnel myid");
  CHECK(missing.error().describe() == "no tunnel myid (HTTP 404 NotFoundError)");
  auto html = client.api->getCertificate("myid", "tk_x");
  REQUIRE_FALSE(html.ok());
  CHECK(html.error().status == 401);
  CHECK(html.error().tag.empty());
  CHECK(html.error().message == "the server answered HTTP 401");
  const auto requests = server.requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].starts_with("GET /api/tunnel/myid HTTP/1.1\r\n"));
  CHECK(requests[0].find("Authorization: Bearer tk_x\r\n") != std::string::npos);
  CHECK(requests[1].starts_with("GET /api/tunnel/myid/certificate HTTP/1.1\r\n"));
  CHECK(client.waits.empty());
}

TEST_CASE("client api: 429 and 503 are retried after Retry-After, at most 8 s each") {
  SUBCASE("then success") {
    CannedServer server(
        {answer(503, R"({"_tag":"ServiceUnavailableError","message":"busy"})",
                "Retry-After: 2\r\n"),
         answer(429, R"({"_tag":"RateLimitedError","message":"slow"})"),
         answer(202, R"({"state":"issuing","chain":null,"notAfter":null,"error":null})")});
    Client client(server.port());
    auto bound = client.api->bindCertificate("myid", "tk_x", "-----CSR-----\n");
    REQUIRE(bound.ok());
    CHECK(bound->httpStatus == 202);
    CHECK(bound->state == "issuing");
    CHECK(client.waits == std::vector<milliseconds>{milliseconds(2000), milliseconds(1000)});
    const auto requests = server.requests();
    REQUIRE(requests.size() == 3);
    for (const std::string& request : requests) {
      CHECK(request.starts_with("PUT /api/tunnel/myid/certificate HTTP/1.1\r\n"));
      CHECK(request.ends_with("{\"csr\":\"-----CSR-----\\n\"}"));
    }
  }
  SUBCASE("then the message") {
    const std::string limited = answer(
        429, R"({"_tag":"RateLimitedError","message":"too many tunnels"})", "Retry-After: 120\r\n");
    CannedServer server({limited, limited, limited, limited});
    Client client(server.port());
    auto created = client.api->createTunnel(std::nullopt);
    REQUIRE_FALSE(created.ok());
    CHECK(created.error().status == 429);
    CHECK(created.error().message == "too many tunnels");
    CHECK(client.waits == std::vector<milliseconds>(3, milliseconds(8000)));
    CHECK(server.requests().size() == 4);
  }
}

TEST_CASE("client api: a ready certificate comes with its chain") {
  CannedServer server(
      {answer(200,
              R"({"state":"ready","chain":"PEM","notAfter":"2030-01-01T00:00:00Z","error":null})"),
       answer(200, R"({"state":"ready","chain":null})"),
       answer(200, R"({"state":"failed","error":"the CA said no"})")});
  Client client(server.port());
  auto ready = client.api->getCertificate("myid", "tk_x");
  REQUIRE(ready.ok());
  CHECK(ready->chain == "PEM");
  CHECK(ready->notAfter == "2030-01-01T00:00:00Z");
  auto broken = client.api->getCertificate("myid", "tk_x");
  REQUIRE_FALSE(broken.ok());
  CHECK(broken.error().status == 0);
  auto failed = client.api->getCertificate("myid", "tk_x");
  REQUIRE(failed.ok());
  CHECK(failed->state == "failed");
  CHECK(failed->error == "the CA said no");
}

TEST_CASE("client api: no server is status 0 with curl's reason") {
  uint16_t port = 0;
  {
    CannedServer server({});  // bound, then closed: nothing listens on the port afterwards
    port = server.port();
  }
  Client client(port);
  auto created = client.api->createTunnel(std::nullopt);
  REQUIRE_FALSE(created.ok());
  CHECK(created.error().status == 0);
  CHECK(created.error().message.starts_with(
      "cannot reach http://127.0.0.1:" + std::to_string(port) + ": "));
}
