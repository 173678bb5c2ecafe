// The OpenAPI 3.0.3 description of the HTTP API, generated from the router's route table, so it
// lists exactly the routes the router serves. Pure: builds a JSON value, no I/O.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "controld/api/api_router.h"

namespace ot::controld {

struct OpenApiInfo {
  std::string title = "OpenTunnel API";
  std::string version = "0.1.0";
  std::string description;
  std::vector<std::string> servers;  // base URLs, e.g. https://opentunnel.example
};

// paths (one operation per route, in table order), their path parameters, bearer security,
// request bodies, responses with their headers and schemas, and components: the router's schemas,
// the bearer scheme and the documented headers. Every $ref it writes resolves in the document.
[[nodiscard]] nlohmann::ordered_json buildOpenApi(const ApiRouter& router, const OpenApiInfo& info);

}  // namespace ot::controld
