// The route check's HTTP exchange (controld/mesh/route_check_http.h): requests and answers parsed
// as they arrive, bounded, and refused when malformed.
#include <doctest/doctest.h>

#include "controld/mesh/route_check_http.h"

namespace ot::mesh {
namespace {

TEST_CASE("route check: a request is parsed once its head is whole") {
  const std::string request = formatRouteCheckRequest(
      "127.0.0.12:9000", routeCheckTarget("my-tunnel"), "OPENTUNNEL-AUTH/2 a b c d e");
  RouteCheckRequest parsed;
  for (size_t cut = 0; cut < request.size(); ++cut) {
    CHECK(parseRouteCheckRequest(std::string_view(request).substr(0, cut), parsed) ==
          HttpParse::kNeedMore);
  }
  REQUIRE(parseRouteCheckRequest(request, parsed) == HttpParse::kComplete);
  CHECK(parsed.method == "GET");
  CHECK(parsed.target == "/internal/tunnel/my-tunnel/routes");
  CHECK(parsed.tunnelId == "my-tunnel");
  REQUIRE(parsed.auth);
  CHECK(*parsed.auth == "OPENTUNNEL-AUTH/2 a b c d e");

  RouteCheckRequest other;
  REQUIRE(parseRouteCheckRequest("GET /internal/other HTTP/1.1\r\nX-Opentunnel-Auth: v\r\n\r\n",
                                 other) == HttpParse::kComplete);
  CHECK(other.tunnelId.empty());
  CHECK(other.auth == std::optional<std::string>("v"));
  CHECK(parseRouteCheckRequest("GET / HTTP/1.0\r\n\r\n", other) == HttpParse::kInvalid);
  CHECK(parseRouteCheckRequest("GARBAGE\r\n\r\n", other) == HttpParse::kInvalid);
  CHECK(parseRouteCheckRequest("GET / HTTP/1.1\r\nno colon here\r\n\r\n", other) ==
        HttpParse::kInvalid);
  // A head that never ends is refused once it passes the bound.
  const std::string endless = "GET / HTTP/1.1\r\n" + std::string(kMaxRouteCheckRequestBytes, 'a');
  CHECK(parseRouteCheckRequest(endless, other) == HttpParse::kInvalid);
}

TEST_CASE("route check: answers round-trip and a bad one is invalid") {
  const std::string answer = formatRouteCheckAnswer("t", {"", "api"}, 3);
  RouteCheckAnswer parsed;
  for (size_t cut = 0; cut < answer.size(); ++cut) {
    CHECK(parseRouteCheckAnswer(std::string_view(answer).substr(0, cut), parsed) ==
          HttpParse::kNeedMore);
  }
  REQUIRE(parseRouteCheckAnswer(answer, parsed) == HttpParse::kComplete);
  CHECK(parsed.status == 200);
  CHECK(parsed.routes == std::vector<std::string>{"", "api"});
  CHECK(parsed.bridges == 3);

  REQUIRE(parseRouteCheckAnswer(formatRouteCheckError(401, "bad_proof"), parsed) ==
          HttpParse::kComplete);
  CHECK(parsed.status == 401);
  CHECK(parsed.routes.empty());

  CHECK(parseRouteCheckAnswer("HTTP/1.1 200 OK\r\n\r\n", parsed) == HttpParse::kInvalid);
  CHECK(parseRouteCheckAnswer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", parsed) ==
        HttpParse::kInvalid);
  CHECK(parseRouteCheckAnswer("HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\n{\"routes\":[1]}",
                              parsed) == HttpParse::kInvalid);
  CHECK(parseRouteCheckAnswer("SSH-2.0-x\r\n\r\n", parsed) == HttpParse::kInvalid);
  CHECK(parseRouteCheckAnswer("HTTP/1.1 200 OK\r\nContent-Length: 999999\r\n\r\n", parsed) ==
        HttpParse::kInvalid);
}

}  // namespace
}  // namespace ot::mesh
