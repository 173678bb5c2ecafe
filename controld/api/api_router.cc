#include "controld/api/api_router.h"

#include <algorithm>
#include <exception>
#include <set>
#include <stdexcept>

#include "common/log.h"

namespace ot::controld {
namespace {

const log::Logger kApiRouterLog("controld.api");

bool isParameterName(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

bool isMethod(std::string_view method) {
  return !method.empty() &&
         std::all_of(method.begin(), method.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

[[noreturn]] void rejectRoute(const std::string& what) {
  throw std::invalid_argument(what);
}

}  // namespace

std::string_view PathParams::get(std::string_view name) const {
  for (const auto& [key, value] : values) {
    if (key == name) return value;
  }
  return {};
}

std::optional<std::vector<std::string_view>> splitPath(std::string_view path) {
  if (path.empty() || path.front() != '/') return std::nullopt;
  std::vector<std::string_view> segments;
  size_t start = 1;
  while (true) {
    const size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) {
      segments.push_back(path.substr(start));
      return segments;
    }
    segments.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
}

void ApiRouter::addSchema(std::string name, nlohmann::ordered_json schema) {
  if (name.empty() || schemas_.count(name) != 0)
    rejectRoute("schema added twice or unnamed: " + name);
  schemas_.emplace(std::move(name), std::move(schema));
}

void ApiRouter::add(Route route) {
  const std::string where = route.method + " " + route.path;
  if (!isMethod(route.method)) rejectRoute(where + ": the method must be upper case");
  if (!route.handler) rejectRoute(where + ": no handler");
  if (route.doc.responses.empty()) rejectRoute(where + ": no documented response");
  const auto split = splitPath(route.path);
  if (!split) rejectRoute(where + ": the template must start with '/'");

  std::vector<Segment> segments;
  std::set<std::string> names;
  for (std::string_view part : *split) {
    if (part.size() >= 2 && part.front() == '{' && part.back() == '}') {
      const std::string name(part.substr(1, part.size() - 2));
      if (!isParameterName(name) || !names.insert(name).second) {
        rejectRoute(where + ": bad or repeated parameter {" + name + "}");
      }
      segments.push_back({name, true});
    } else {
      if (part.empty() || part.find_first_of("{}") != std::string_view::npos) {
        rejectRoute(where + ": bad segment '" + std::string(part) + "'");
      }
      segments.push_back({std::string(part), false});
    }
  }
  std::set<std::string> documented;
  for (const ApiParameterDoc& parameter : route.doc.parameters) documented.insert(parameter.name);
  if (documented != names || documented.size() != route.doc.parameters.size()) {
    rejectRoute(where + ": the documented parameters differ from the template's");
  }
  const auto known = [this](const std::string& schema) {
    return schema.empty() || schemas_.count(schema) != 0;
  };
  if (route.doc.requestBody &&
      (route.doc.requestBody->schema.empty() || !known(route.doc.requestBody->schema))) {
    rejectRoute(where + ": the request body names an unknown schema");
  }
  for (const ApiResponseDoc& response : route.doc.responses) {
    if (!known(response.schema)) rejectRoute(where + ": a response names an unknown schema");
  }

  auto it = std::find_if(templates_.begin(), templates_.end(),
                         [&](const Template& t) { return t.path == route.path; });
  if (it == templates_.end()) {
    templates_.push_back(Template{route.path, std::move(segments), {}});
    it = templates_.end() - 1;
  }
  for (size_t index : it->routes) {
    if (routes_[index].method == route.method) rejectRoute(where + ": added twice");
  }
  it->routes.push_back(routes_.size());
  routes_.push_back(std::move(route));
}

ApiRouter::Match ApiRouter::match(std::string_view method, std::string_view path) const {
  Match result;
  const auto split = splitPath(path);
  if (!split) return result;

  const Template* best = nullptr;
  for (const Template& candidate : templates_) {
    if (candidate.segments.size() != split->size()) continue;
    bool matches = true;
    for (size_t i = 0; i < split->size() && matches; ++i) {
      const Segment& segment = candidate.segments[i];
      matches = segment.parameter ? !(*split)[i].empty() : segment.text == (*split)[i];
    }
    if (!matches) continue;
    if (best == nullptr) {
      best = &candidate;
      continue;
    }
    for (size_t i = 0; i < split->size(); ++i) {
      const bool literal = !candidate.segments[i].parameter;
      if (literal != !best->segments[i].parameter) {
        if (literal) best = &candidate;
        break;
      }
    }
  }
  if (best == nullptr) return result;

  for (size_t index : best->routes) {
    if (routes_[index].method != method) continue;
    result.kind = MatchKind::kMatched;
    result.route = &routes_[index];
    for (size_t i = 0; i < split->size(); ++i) {
      if (best->segments[i].parameter) {
        result.params.values.emplace_back(best->segments[i].text, std::string((*split)[i]));
      }
    }
    return result;
  }
  result.kind = MatchKind::kWrongMethod;
  for (size_t index : best->routes) result.allowed.push_back(routes_[index].method);
  return result;
}

ApiResponse ApiRouter::handle(const ApiRequest& request) const {
  try {
    Match found = match(request.method, request.path);
    switch (found.kind) {
      case MatchKind::kUnknownPath:
        if (fallback_) {
          if (auto answer = fallback_(request)) return std::move(*answer);
        }
        return ApiResponse::error(404, "NotFoundError", "no such API endpoint");
      case MatchKind::kWrongMethod: {
        std::string allowed;
        for (const std::string& method : found.allowed) {
          allowed += (allowed.empty() ? "" : ", ") + method;
        }
        ApiResponse response = ApiResponse::error(
            405, "MethodNotAllowedError", "method not allowed; this endpoint answers " + allowed);
        response.headers.emplace_back("Allow", allowed);
        return response;
      }
      case MatchKind::kMatched:
        break;
    }
    return found.route->handler(request, found.params);
  } catch (const std::exception& error) {
    kApiRouterLog.error(
        "API handler failed",
        {{"method", request.method}, {"path", request.path}, {"error", error.what()}});
  } catch (...) {
    kApiRouterLog.error("API handler failed", {{"method", request.method}, {"path", request.path}});
  }
  return ApiResponse::error(500, "InternalServerError", "internal error");
}

}  // namespace ot::controld
