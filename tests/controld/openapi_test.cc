// The route table and the OpenAPI document generated from it: the document lists exactly the
// routes the router serves (walked both ways), every $ref resolves, every operation is complete,
// /openapi.json serves that document; and the table refuses what would make the two disagree.
#include "controld/api/openapi.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <set>
#include <stdexcept>

#include "controld/api/api_routes.h"
#include "tests/controld/api_test_support.h"

namespace ot::controld {
namespace {

using Json = nlohmann::ordered_json;

std::string upper(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return text;
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// A concrete path for a template: every {name} becomes "x<name>".
std::string concrete(const std::string& path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '{') {
      out += path[i];
      continue;
    }
    const size_t end = path.find('}', i);
    out += "x" + path.substr(i + 1, end - i - 1);
    i = end;
  }
  return out;
}

std::vector<std::string> templateParameters(const std::string& path) {
  std::vector<std::string> names;
  for (size_t i = path.find('{'); i != std::string::npos; i = path.find('{', i + 1)) {
    names.push_back(path.substr(i + 1, path.find('}', i) - i - 1));
  }
  return names;
}

// Every "$ref" in the document, as found.
void collectRefs(const Json& node, std::vector<std::string>& refs) {
  if (node.is_object()) {
    for (const auto& [key, value] : node.items()) {
      if (key == "$ref" && value.is_string()) refs.push_back(value.get<std::string>());
      collectRefs(value, refs);
    }
  } else if (node.is_array()) {
    for (const Json& item : node) collectRefs(item, refs);
  }
}

struct Fixture {
  Fixture()
      : db(testing::TestDatabase::sqlite()),
        store(db->open()),
        service(testing::testConfig(), {*store, *store, *store, *store}, registry, publisher,
                notifier, [] { return 0; }),
        router(buildApiRouter(service, {}, {}, UsageApi{store.get(), {}})),
        document(buildOpenApi(router, testInfo())) {}

  static OpenApiInfo testInfo() {
    OpenApiInfo info;
    info.servers = {"https://tunnel.test"};
    return info;
  }

  std::unique_ptr<testing::TestDatabase> db;
  std::unique_ptr<SqlStore> store;
  BridgeRegistry registry;
  testing::RecordingPublisher publisher;
  testing::CountingNotifier notifier;
  TunnelService service;
  ApiRouter router;
  Json document;
};

TEST_CASE("openapi: the document lists exactly the routes the router serves") {
  Fixture f;
  const Json& paths = f.document.at("paths");

  // Document -> router: each documented operation is served, by the route of that template.
  std::set<std::pair<std::string, std::string>> documented;
  for (const auto& pathEntry : paths.items()) {
    const std::string path = pathEntry.key();
    const Json& item = pathEntry.value();
    for (const auto& methodEntry : item.items()) {
      const std::string method = methodEntry.key();
      const Json& operation = methodEntry.value();
      CAPTURE(path);
      CAPTURE(method);
      documented.insert({upper(method), path});
      const auto match = f.router.match(upper(method), concrete(path));
      REQUIRE(match.kind == ApiRouter::MatchKind::kMatched);
      CHECK(match.route->path == path);
      CHECK(operation.at("operationId") == match.route->doc.operationId);
    }
  }
  // Router -> document: each route is documented, once.
  std::set<std::pair<std::string, std::string>> served;
  for (const Route& route : f.router.routes()) {
    CAPTURE(route.path);
    CHECK(paths.contains(route.path));
    CHECK(paths[route.path].contains(lower(route.method)));
    served.insert({route.method, route.path});
  }
  CHECK(documented == served);
  CHECK(served.size() == f.router.routes().size());
  CHECK(served == std::set<std::pair<std::string, std::string>>{
                      {"POST", "/api/tunnel"},
                      {"GET", "/api/tunnel/{id}"},
                      {"DELETE", "/api/tunnel/{id}"},
                      {"PUT", "/api/tunnel/{id}/certificate"},
                      {"GET", "/api/tunnel/{id}/certificate"},
                      {"GET", "/api/tunnel/{id}/usage"},
                      {"GET", "/api/tunnel/{id}/status"},
                      {"GET", "/api/tunnel/{id}/origins"},
                      {"POST", "/api/tunnel/{id}/origins"},
                      {"DELETE", "/api/tunnel/{id}/origins/{name}"},
                      {"POST", "/api/tunnel/{id}/origins/rotate"},
                      {"PUT", "/api/tunnel/{id}/origins/{name}/direct"},
                      {"DELETE", "/api/tunnel/{id}/origins/{name}/direct"},
                      {"PUT", "/api/tunnel/{id}/balancing"},
                      {"GET", "/health"},
                      {"GET", "/openapi.json"},
                  });
  // The bridge upgrade belongs to relayd; controld neither serves nor documents it.
  CHECK(f.router.match("GET", "/api/tunnel/abc/bridge").kind == ApiRouter::MatchKind::kUnknownPath);
}

TEST_CASE("openapi: every reference resolves and every operation is complete") {
  Fixture f;
  const Json& doc = f.document;
  CHECK(doc.at("openapi") == "3.0.3");
  CHECK(doc.at("info").at("title") == "OpenTunnel API");
  CHECK(doc.at("servers") == Json::array({{{"url", "https://tunnel.test"}}}));

  std::vector<std::string> refs;
  collectRefs(doc, refs);
  CHECK(refs.size() > 20);
  for (const std::string& ref : refs) {
    CAPTURE(ref);
    REQUIRE(ref.rfind("#/", 0) == 0);
    const Json::json_pointer pointer(ref.substr(1));
    CHECK(doc.contains(pointer));
  }

  const Json& error = doc.at("/components/schemas/Error"_json_pointer);
  CHECK(error.at("required") == Json::array({"_tag", "message"}));
  const Json& tags = error.at("/properties/_tag/enum"_json_pointer);
  for (const char* tag : {"BadRequestError", "UnauthorizedError", "NotFoundError",
                          "MethodNotAllowedError", "ConflictError", "UnsupportedMediaTypeError",
                          "RateLimitedError", "ServiceUnavailableError", "InternalServerError"}) {
    CHECK(std::find(tags.begin(), tags.end(), tag) != tags.end());
  }
  CHECK(doc.at("/components/securitySchemes/bearerAuth/scheme"_json_pointer) == "bearer");

  std::set<std::string> operationIds;
  for (const auto& pathEntry : doc.at("paths").items()) {
    const std::string path = pathEntry.key();
    const Json& item = pathEntry.value();
    for (const auto& methodEntry : item.items()) {
      const std::string method = methodEntry.key();
      const Json& op = methodEntry.value();
      CAPTURE(path);
      CAPTURE(method);
      CHECK(operationIds.insert(op.at("operationId").get<std::string>()).second);
      CHECK_FALSE(op.at("summary").get<std::string>().empty());

      std::vector<std::string> parameters;
      for (const Json& parameter : op.value("parameters", Json::array())) {
        CHECK(parameter.at("in") == "path");
        CHECK(parameter.at("required") == true);
        parameters.push_back(parameter.at("name"));
      }
      CHECK(parameters == templateParameters(path));

      const Json& responses = op.at("responses");
      REQUIRE_FALSE(responses.empty());
      for (const auto& statusEntry : responses.items()) {
        const std::string status = statusEntry.key();
        const Json& response = statusEntry.value();
        CAPTURE(status);
        CHECK_FALSE(response.at("description").get<std::string>().empty());
        if (std::stoi(status) >= 400) {
          CHECK(response.at("/content/application~1json/schema/$ref"_json_pointer) ==
                "#/components/schemas/Error");
        }
      }
      const bool authenticated = path.find("{id}") != std::string::npos;
      CHECK(op.contains("security") == authenticated);
      CHECK(responses.contains("401") == authenticated);
      CHECK(responses.contains("404") == authenticated);
      if (authenticated) {
        CHECK(op.at("security") == Json::parse(R"([{"bearerAuth":[]}])"));
        CHECK(responses.at("401").at("headers").contains("WWW-Authenticate"));
      }
      const bool hasBody = method == "post" || method == "put";
      CHECK(op.contains("requestBody") == hasBody);
      if (hasBody) {
        CHECK(responses.contains("413"));
        CHECK(responses.contains("415"));
        CHECK(responses.contains("429"));
        CHECK(responses.at("429").at("headers").contains("Retry-After"));
        CHECK(responses.at("503").at("headers").contains("Retry-After"));
        // Adding an origin is the one POST whose body is required (it names the origin).
        CHECK(op.at("requestBody").at("required") ==
              (method == "put" || path == "/api/tunnel/{id}/origins"));
      }
      if (method != "get" || path != "/openapi.json") CHECK(responses.contains("503"));
    }
  }
  CHECK(
      doc.at(
          "/paths/~1api~1tunnel/post/responses/201/content/application~1json/schema/$ref"_json_pointer) ==
      "#/components/schemas/CreatedTunnel");
  CHECK(
      doc.at("/paths/~1api~1tunnel~1{id}~1certificate/put/responses"_json_pointer).contains("202"));
}

TEST_CASE("openapi: /openapi.json serves the document generated from the table") {
  Fixture f;
  ApiRequest request;
  request.method = "GET";
  request.path = "/openapi.json";
  const ApiResponse response = f.router.handle(request);
  REQUIRE(response.status == 200);
  const Json served = Json::parse(response.body);
  CHECK(served.at("paths") == f.document.at("paths"));
  CHECK(served.at("components") == f.document.at("components"));
  CHECK(served.at("servers") == f.document.at("servers"));
  CHECK(served.at("info").at("version") == "0.1.0");
  CHECK_FALSE(served.at("info").at("description").get<std::string>().empty());
}

TEST_CASE("openapi: a route added to a table appears in its document, with its parameters") {
  ApiRouter router;
  router.addSchema("Thing", Json{{"type", "object"}});
  RouteDoc doc;
  doc.operationId = "getThing";
  doc.summary = "A thing";
  doc.parameters = {{"a", "first"}, {"b", "second"}};
  doc.responses = {{200, "ok", "Thing", {"Retry-After", "X-Custom"}}};
  router.add({"GET", "/things/{a}/{b}", doc, [](const ApiRequest&, const PathParams& params) {
                return ApiResponse::json(
                    200, std::string(params.get("a")) + "," + std::string(params.get("b")));
              }});
  const Json document = buildOpenApi(router, {});
  CHECK(document.at("paths").size() == 1);
  const Json& op = document.at("/paths/~1things~1{a}~1{b}/get"_json_pointer);
  CHECK(op.at("parameters").size() == 2);
  CHECK(op.at("parameters")[1].at("name") == "b");
  CHECK(op.at("/responses/200/headers/Retry-After/$ref"_json_pointer) ==
        "#/components/headers/RetryAfter");
  CHECK(op.at("/responses/200/headers/X-Custom/schema/type"_json_pointer) == "string");
  CHECK(document.at("/components/headers/RetryAfter/schema/type"_json_pointer) == "integer");
  CHECK_FALSE(document.contains("servers"));

  ApiRequest request;
  request.method = "GET";
  request.path = "/things/one/two";
  CHECK(router.handle(request).body == "one,two");
  CHECK(buildOpenApi(ApiRouter(), {}).at("paths").empty());
}

RouteDoc minimalDoc() {
  RouteDoc doc;
  doc.operationId = "op";
  doc.summary = "op";
  doc.responses = {{200, "ok", "", {}}};
  return doc;
}

ApiResponse ok(const ApiRequest&, const PathParams&) {
  return ApiResponse::json(200, "{}");
}

TEST_CASE("api router: refuses a table that the document could not describe truthfully") {
  ApiRouter router;
  router.add({"GET", "/a/{id}",
              [] {
                RouteDoc doc = minimalDoc();
                doc.parameters = {{"id", "the id"}};
                return doc;
              }(),
              ok});
  CHECK_THROWS_AS(router.add({"GET", "/a/{id}",
                              [] {
                                RouteDoc doc = minimalDoc();
                                doc.parameters = {{"id", "again"}};
                                return doc;
                              }(),
                              ok}),
                  std::invalid_argument);
  CHECK_THROWS_AS(router.add({"GET", "/b/{id}", minimalDoc(), ok}), std::invalid_argument);
  CHECK_THROWS_AS(router.add({"GET", "/c",
                              [] {
                                RouteDoc doc = minimalDoc();
                                doc.parameters = {{"id", "no such parameter"}};
                                return doc;
                              }(),
                              ok}),
                  std::invalid_argument);
  CHECK_THROWS_AS(router.add({"GET", "/d",
                              [] {
                                RouteDoc doc = minimalDoc();
                                doc.responses[0].schema = "Undefined";
                                return doc;
                              }(),
                              ok}),
                  std::invalid_argument);
  CHECK_THROWS_AS(router.add({"PUT", "/e",
                              [] {
                                RouteDoc doc = minimalDoc();
                                doc.requestBody = ApiBodyDoc{"Undefined", true, ""};
                                return doc;
                              }(),
                              ok}),
                  std::invalid_argument);
  CHECK_THROWS_AS(router.add({"GET", "/f",
                              [] {
                                RouteDoc doc = minimalDoc();
                                doc.responses.clear();
                                return doc;
                              }(),
                              ok}),
                  std::invalid_argument);
  CHECK_THROWS_AS(router.add({"GET", "/g", minimalDoc(), nullptr}), std::invalid_argument);
  CHECK_THROWS_AS(router.add({"get", "/h", minimalDoc(), ok}), std::invalid_argument);
  for (const char* bad :
       {"", "nope", "/a//b", "/a/{}", "/a/{x", "/a/x}", "/a/{x-y}", "/a/{x}/{x}", "/a/"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(router.add({"POST", bad, minimalDoc(), ok}), std::invalid_argument);
  }
  router.addSchema("S", Json::object());
  CHECK_THROWS_AS(router.addSchema("S", Json::object()), std::invalid_argument);
  CHECK(router.routes().size() == 1);
}

TEST_CASE("api router: the most specific template wins, then the method decides") {
  ApiRouter router;
  const auto answer = [](std::string text) {
    return [text](const ApiRequest&, const PathParams& params) {
      return ApiResponse::json(200, text + ":" + std::string(params.get("id")));
    };
  };
  RouteDoc withId = minimalDoc();
  withId.parameters = {{"id", "id"}};
  router.add({"GET", "/t/{id}", withId, answer("param")});
  router.add({"GET", "/t/stats", minimalDoc(), answer("literal")});
  router.add({"DELETE", "/t/{id}", withId, answer("delete")});

  ApiRequest request;
  request.method = "GET";
  request.path = "/t/stats";
  CHECK(router.handle(request).body == "literal:");
  request.path = "/t/abc";
  CHECK(router.handle(request).body == "param:abc");
  request.method = "DELETE";
  CHECK(router.handle(request).body == "delete:abc");
  request.path = "/t/stats";
  const ApiResponse wrong = router.handle(request);
  CHECK(wrong.status == 405);
  CHECK(testing::headerOf(wrong, "Allow") == "GET");
  request.path = "/t/";
  CHECK(router.handle(request).status == 404);
}

TEST_CASE("api router: a handler that throws answers 500 and the router goes on") {
  ApiRouter router;
  router.add(
      {"GET", "/boom", minimalDoc(), [](const ApiRequest&, const PathParams&) -> ApiResponse {
         throw std::runtime_error("boom");
       }});
  router.add({"GET", "/fine", minimalDoc(), ok});
  ApiRequest request;
  request.method = "GET";
  request.path = "/boom";
  const ApiResponse failed = router.handle(request);
  CHECK(failed.status == 500);
  CHECK(failed.body == R"({"_tag":"InternalServerError","message":"internal error"})");
  request.path = "/fine";
  CHECK(router.handle(request).status == 200);
}

}  // namespace
}  // namespace ot::controld
