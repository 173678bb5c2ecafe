#include "controld/api_types.h"

#include <nlohmann/json.hpp>
#include <strings.h>

namespace ot::controld {

std::optional<std::string_view> ApiRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key.size() == name.size() && strncasecmp(key.data(), name.data(), name.size()) == 0) {
      return std::string_view(value);
    }
  }
  return std::nullopt;
}

ApiResponse ApiResponse::json(int status, std::string json_body) {
  ApiResponse response;
  response.status = status;
  response.headers.emplace_back("Content-Type", "application/json");
  response.body = std::move(json_body);
  return response;
}

ApiResponse ApiResponse::error(int status, std::string_view tag, std::string_view message) {
  nlohmann::ordered_json body = {{"_tag", tag}, {"message", message}};
  // replace: a message built from client input may hold invalid UTF-8.
  return json(status, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace ot::controld
