// The API's route table: method + path template ("/api/tunnel/{id}/certificate") + the route's
// documentation + its handler. The router dispatches requests by it and openapi.h describes the
// API from it, so the served routes and the documented ones are one list.
//
// Built once at startup (add() and addSchema() are not thread-safe), then only read: handle() may
// run on any number of worker threads at once. Owns its routes and their handlers.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "controld/api/api_types.h"

namespace ot::controld {

// A path parameter ({id}) as the client wrote it (percent-encoding untouched).
struct PathParams {
  std::vector<std::pair<std::string, std::string>> values;
  // The value of {name}; empty when the template has no such parameter.
  [[nodiscard]] std::string_view get(std::string_view name) const;
};

struct ApiParameterDoc {
  std::string name;  // as in the template, without braces
  std::string description;
};

struct ApiBodyDoc {
  std::string schema;  // a component schema name (ApiRouter::addSchema)
  bool required = true;
  std::string description;
};

struct ApiResponseDoc {
  int status = 200;
  std::string description;
  std::string schema;                // a component schema name; empty: no body
  std::vector<std::string> headers;  // response headers worth documenting ("Retry-After")
};

struct RouteDoc {
  std::string operationId;
  std::string summary;
  std::string description;
  std::string tag;
  bool bearerAuth = false;                  // needs Authorization: Bearer <the tunnel's token>
  std::vector<ApiParameterDoc> parameters;  // one per {name} in the template
  std::optional<ApiBodyDoc> requestBody;
  std::vector<ApiResponseDoc> responses;
};

using RouteHandler = std::function<ApiResponse(const ApiRequest&, const PathParams&)>;
// Asked for a path no route has (the website, docs/website.md); std::nullopt: not its path either.
using FallbackHandler = std::function<std::optional<ApiResponse>(const ApiRequest&)>;

struct Route {
  std::string method;  // upper case: GET, POST, PUT, DELETE
  std::string path;    // a template: literal segments and {name} segments
  RouteDoc doc;
  RouteHandler handler;
};

class ApiRouter {
 public:
  enum class MatchKind { kMatched, kUnknownPath, kWrongMethod };
  struct Match {
    MatchKind kind = MatchKind::kUnknownPath;
    const Route* route = nullptr;      // when matched
    PathParams params;                 // when matched
    std::vector<std::string> allowed;  // the path's methods, when kWrongMethod
  };

  // Throws std::invalid_argument on a programming error, so a broken table fails at startup: a
  // malformed template, a (method, template) pair added twice, a {name} without its parameter
  // doc (or a doc without its {name}), no handler, no responses, or a schema name no addSchema
  // call defined (schemas must be added first).
  void add(Route route);
  // A component schema (OpenAPI 3.0 JSON Schema) that route docs name. Throws on a duplicate.
  void addSchema(std::string name, nlohmann::ordered_json schema);
  // Answers requests for unknown paths before the 404 (set once, like add()).
  void setFallback(FallbackHandler fallback) { fallback_ = std::move(fallback); }

  // Finds the route for a request line. A path matching several templates goes to the most
  // specific one (a literal segment beats a parameter at the first place they differ).
  [[nodiscard]] Match match(std::string_view method, std::string_view path) const;

  // Dispatches: the fallback's answer, else 404 NotFoundError, for an unknown path; 405
  // MethodNotAllowedError (with Allow) for a known path and another method, 500 if a handler
  // throws. Never throws.
  [[nodiscard]] ApiResponse handle(const ApiRequest& request) const;

  [[nodiscard]] const std::vector<Route>& routes() const { return routes_; }
  [[nodiscard]] const std::map<std::string, nlohmann::ordered_json>& schemas() const {
    return schemas_;
  }

 private:
  struct Segment {
    std::string text;  // the literal, or the parameter name
    bool parameter = false;
  };
  struct Template {
    std::string path;
    std::vector<Segment> segments;
    std::vector<size_t> routes;  // indexes into routes_, one per method
  };

  std::vector<Route> routes_;
  std::vector<Template> templates_;
  std::map<std::string, nlohmann::ordered_json> schemas_;
  FallbackHandler fallback_;
};

// Splits a path at '/' (it must start with one); std::nullopt otherwise. "/" gives {""}.
[[nodiscard]] std::optional<std::vector<std::string_view>> splitPath(std::string_view path);

}  // namespace ot::controld
