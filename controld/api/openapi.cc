#include "controld/api/openapi.h"

#include <set>
#include <string_view>

#include "common/text.h"

namespace ot::controld {
namespace {

using Json = nlohmann::ordered_json;

// Response headers the routes may name, documented once under components/headers.
struct HeaderDoc {
  std::string_view name;
  std::string_view component;
  std::string_view description;
  std::string_view type;
};
constexpr HeaderDoc kHeaders[] = {
    {"Retry-After", "RetryAfter", "Seconds to wait before trying again.", "integer"},
    {"Allow", "Allow", "The methods this path answers.", "string"},
    {"WWW-Authenticate", "WwwAuthenticate", "The authentication scheme: Bearer.", "string"},
};

const HeaderDoc* findHeader(std::string_view name) {
  for (const HeaderDoc& header : kHeaders) {
    if (header.name == name) return &header;
  }
  return nullptr;
}

Json schemaRef(const std::string& name) {
  return Json{{"$ref", "#/components/schemas/" + name}};
}

Json jsonContent(const std::string& schema) {
  return Json{{"application/json", Json{{"schema", schemaRef(schema)}}}};
}

Json response(const ApiResponseDoc& doc) {
  Json out = {{"description", doc.description}};
  if (!doc.headers.empty()) {
    Json headers = Json::object();
    for (const std::string& name : doc.headers) {
      if (const HeaderDoc* known = findHeader(name)) {
        headers[name] = {{"$ref", "#/components/headers/" + std::string(known->component)}};
      } else {
        headers[name] = {{"schema", {{"type", "string"}}}};
      }
    }
    out["headers"] = std::move(headers);
  }
  if (!doc.schema.empty()) out["content"] = jsonContent(doc.schema);
  return out;
}

Json operation(const Route& route) {
  const RouteDoc& doc = route.doc;
  Json op = Json::object();
  if (!doc.tag.empty()) op["tags"] = Json::array({doc.tag});
  op["summary"] = doc.summary;
  if (!doc.description.empty()) op["description"] = doc.description;
  op["operationId"] = doc.operationId;
  if (!doc.parameters.empty()) {
    Json parameters = Json::array();
    for (const ApiParameterDoc& parameter : doc.parameters) {
      parameters.push_back({{"name", parameter.name},
                            {"in", "path"},
                            {"required", true},
                            {"description", parameter.description},
                            {"schema", {{"type", "string"}}}});
    }
    op["parameters"] = std::move(parameters);
  }
  if (doc.requestBody) {
    Json body = {{"required", doc.requestBody->required}};
    if (!doc.requestBody->description.empty()) {
      body["description"] = doc.requestBody->description;
    }
    body["content"] = jsonContent(doc.requestBody->schema);
    op["requestBody"] = std::move(body);
  }
  Json responses = Json::object();
  for (const ApiResponseDoc& docResponse : doc.responses) {
    responses[std::to_string(docResponse.status)] = response(docResponse);
  }
  op["responses"] = std::move(responses);
  if (doc.bearerAuth) op["security"] = Json::array({Json{{"bearerAuth", Json::array()}}});
  return op;
}

}  // namespace

Json buildOpenApi(const ApiRouter& router, const OpenApiInfo& info) {
  Json document = {{"openapi", "3.0.3"}};
  Json infoJson = {{"title", info.title}, {"version", info.version}};
  if (!info.description.empty()) infoJson["description"] = info.description;
  document["info"] = std::move(infoJson);
  if (!info.servers.empty()) {
    Json servers = Json::array();
    for (const std::string& url : info.servers) servers.push_back({{"url", url}});
    document["servers"] = std::move(servers);
  }

  Json paths = Json::object();
  std::set<std::string_view> usedHeaders;
  for (const Route& route : router.routes()) {
    paths[route.path][toLower(route.method)] = operation(route);
    for (const ApiResponseDoc& doc : route.doc.responses) {
      for (const std::string& name : doc.headers) usedHeaders.insert(name);
    }
  }
  document["paths"] = std::move(paths);

  Json schemas = Json::object();
  for (const auto& [name, schema] : router.schemas()) schemas[name] = schema;
  Json headers = Json::object();
  for (const HeaderDoc& header : kHeaders) {
    if (usedHeaders.count(header.name) == 0) continue;
    headers[std::string(header.component)] = {{"description", header.description},
                                              {"schema", {{"type", header.type}}}};
  }
  Json components = {{"schemas", std::move(schemas)}};
  if (!headers.empty()) components["headers"] = std::move(headers);
  components["securitySchemes"] = {
      {"bearerAuth",
       {{"type", "http"},
        {"scheme", "bearer"},
        {"description", "The tunnel's token, returned once when the tunnel is created."}}}};
  document["components"] = std::move(components);
  return document;
}

}  // namespace ot::controld
