#include "common/bridge_control.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_set>
#include <utility>

namespace ot::bridge {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr uint16_t kClosePolicyViolation = 1008;
constexpr uint16_t kCloseProtocolError = 1002;
constexpr uint16_t kCloseInternalError = 1011;

struct CodeName {
  AttachErrorCode code;
  std::string_view name;
};
constexpr std::array<CodeName, 8> kCodeNames = {{
    {AttachErrorCode::kBadToken, "bad_token"},
    {AttachErrorCode::kCertNotReady, "cert_not_ready"},
    {AttachErrorCode::kInvalidRoute, "invalid_route"},
    {AttachErrorCode::kTooManyRoutes, "too_many_routes"},
    {AttachErrorCode::kRouteConflict, "route_conflict"},
    {AttachErrorCode::kTooManyFailures, "too_many_failures"},
    {AttachErrorCode::kTooManyBridges, "too_many_bridges"},
    {AttachErrorCode::kError, "error"},
}};

AttachErrorCode attachErrorCodeFromName(std::string_view name) {
  for (const auto& entry : kCodeNames) {
    if (entry.name == name) return entry.code;
  }
  return AttachErrorCode::kError;
}

AttachError malformed(std::string_view what) {
  return {AttachErrorCode::kError, "malformed attach: " + std::string(what), kCloseProtocolError};
}

AttachError invalidRoute(std::string message) {
  return {AttachErrorCode::kInvalidRoute, std::move(message), kClosePolicyViolation};
}

// A member that is present and not null; optional fields treat null as absent.
const json* member(const json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

// A JSON integer >= 0 (not a float, even 1.0).
std::optional<uint64_t> asUnsigned(const json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer()) {
    const auto signedValue = value.get<int64_t>();
    if (signedValue >= 0) return static_cast<uint64_t>(signedValue);
  }
  return std::nullopt;
}

std::optional<uint32_t> unsignedInRange(const json& value, uint64_t low, uint64_t high) {
  const auto n = asUnsigned(value);
  if (!n || *n < low || *n > high) return std::nullopt;
  return static_cast<uint32_t>(*n);
}

bool isValidName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

bool isValidToken(std::string_view token) {
  if (token.empty() || token.size() > kMaxTokenLength) return false;
  return std::all_of(token.begin(), token.end(), [](char c) { return c > ' ' && c < '\x7F'; });
}

// origin and profile: absent, null or "" mean unnamed.
std::optional<std::string> optionalName(const json& doc, const char* key) {
  const json* value = member(doc, key);
  if (value == nullptr) return std::string();
  if (!value->is_string()) return std::nullopt;
  const auto& name = value->get_ref<const std::string&>();
  if (!name.empty() && !isValidName(name)) return std::nullopt;
  return name;
}

Decoded<std::vector<std::string>, AttachError> normalizeRoutes(const json& list) {
  if (list.empty()) return invalidRoute("routes must not be empty (omit it for the bare hostname)");
  std::vector<std::string> routes;
  routes.reserve(list.size());
  std::unordered_set<std::string> seen;
  seen.reserve(list.size());
  size_t index = 0;
  for (const auto& item : list) {
    const bool fits =
        item.is_string() && item.get_ref<const std::string&>().size() <= kMaxRouteLength;
    std::string route = fits ? item.get<std::string>() : std::string();
    std::transform(route.begin(), route.end(), route.begin(), [](char c) {
      return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    });
    if (!fits || !isValidRoute(route)) {
      return invalidRoute("routes[" + std::to_string(index) +
                          "] is neither \"\" nor one DNS label (1-63 letters, digits or hyphens, "
                          "no hyphen at either end)");
    }
    if (seen.insert(route).second) routes.push_back(std::move(route));
    ++index;
  }
  return routes;
}

template <typename Json>
std::string dump(const Json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

Decoded<RelayMessage, RelayMessageError> parseAttached(const json& doc) {
  Attached attached;
  const json* bridgeId = member(doc, "bridge_id");
  const json* limits = member(doc, "limits");
  const json* heartbeat = member(doc, "heartbeat_ms");
  if (bridgeId == nullptr || !bridgeId->is_string() || limits == nullptr || !limits->is_object() ||
      heartbeat == nullptr) {
    return RelayMessageError::kBadField;
  }
  attached.bridgeId = bridgeId->get<std::string>();
  if (attached.bridgeId.empty() || attached.bridgeId.size() > kMaxBridgeIdLength) {
    return RelayMessageError::kBadField;
  }
  const json* maxConns = member(*limits, "max_conns");
  const json* maxPayload = member(*limits, "max_payload");
  const json* window = member(*limits, "window");
  if (maxConns == nullptr || maxPayload == nullptr || window == nullptr) {
    return RelayMessageError::kBadField;
  }
  const auto conns = unsignedInRange(*maxConns, 1, kMaxConnsPerBridge);
  const auto payload = unsignedInRange(*maxPayload, 1, kMaxDataPayload);
  const auto windowBytes = unsignedInRange(*window, kMinWindow, kMaxWindow);
  const auto heartbeatMs = unsignedInRange(*heartbeat, kMinHeartbeatMs, kMaxHeartbeatMs);
  if (!conns || !payload || !windowBytes || !heartbeatMs) return RelayMessageError::kBadField;
  attached.limits = {*conns, *payload, *windowBytes};
  attached.heartbeatMs = *heartbeatMs;
  if (const json* protocol = member(doc, "protocol")) {
    const auto version = unsignedInRange(*protocol, 1, 1'000'000);
    if (!version) return RelayMessageError::kBadField;
    attached.protocol = *version;
  }
  return RelayMessage(std::move(attached));
}

Decoded<RelayMessage, RelayMessageError> parseAttachError(const json& doc) {
  const json* code = member(doc, "code");
  const json* message = member(doc, "message");
  if (code == nullptr || !code->is_string()) return RelayMessageError::kBadField;
  if (message != nullptr && !message->is_string()) return RelayMessageError::kBadField;
  AttachError error;
  error.code = attachErrorCodeFromName(code->get_ref<const std::string&>());
  error.closeCode = closeCodeFor(error.code);
  if (message != nullptr) error.message = message->get<std::string>();
  return RelayMessage(std::move(error));
}

// Cut to at most `limit` bytes without splitting a UTF-8 sequence.
std::string truncatedUtf8(const std::string& text, size_t limit) {
  if (text.size() <= limit) return text;
  size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

std::optional<ProfileReport> parseProfileReport(const json& item) {
  if (!item.is_object()) return std::nullopt;
  ProfileReport profile;
  auto name = optionalName(item, "name");
  if (!name) return std::nullopt;
  profile.name = std::move(*name);
  const auto count = [&](const char* key, uint64_t high) -> std::optional<uint64_t> {
    const json* value = member(item, key);
    if (value == nullptr) return uint64_t{0};
    const auto n = asUnsigned(*value);
    if (!n || *n > high) return std::nullopt;
    return *n;
  };
  const auto index = count("index", kMaxProfiles - 1);
  const auto wanted = count("links_wanted", 1024);
  const auto up = count("links_up", 1024);
  const auto nextTry = count("next_try_ms", 24ULL * 3600 * 1000);
  if (!index || !wanted || !up || !nextTry) return std::nullopt;
  profile.index = static_cast<uint32_t>(*index);
  profile.linksWanted = static_cast<uint32_t>(*wanted);
  profile.linksUp = static_cast<uint32_t>(*up);
  profile.nextTryMs = *nextTry;
  if (const json* error = member(item, "last_error")) {
    if (!error->is_string() || error->get_ref<const std::string&>().size() > kMaxStatusErrorLength)
      return std::nullopt;
    profile.lastError = error->get<std::string>();
  }
  return profile;
}

}  // namespace

std::string_view attachErrorCodeName(AttachErrorCode code) {
  for (const auto& entry : kCodeNames) {
    if (entry.code == code) return entry.name;
  }
  return "error";
}

uint16_t closeCodeFor(AttachErrorCode code) {
  return code == AttachErrorCode::kError ? kCloseInternalError : kClosePolicyViolation;
}

std::string_view relayMessageErrorName(RelayMessageError error) {
  switch (error) {
    case RelayMessageError::kNotJson:
      return "not_json";
    case RelayMessageError::kNotObject:
      return "not_object";
    case RelayMessageError::kUnknownType:
      return "unknown_type";
    case RelayMessageError::kBadField:
      return "bad_field";
  }
  return "unknown";
}

Decoded<AttachRequest, AttachError> parseClientMessage(std::string_view text) {
  const json doc = json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded()) return malformed("not JSON");
  if (!doc.is_object()) return malformed("not a JSON object");

  // Counted before anything else is looked at, so a huge list costs nothing more.
  const json* routes = member(doc, "routes");
  if (routes != nullptr && routes->is_array() && routes->size() > kMaxRoutesPerAttach) {
    return AttachError{AttachErrorCode::kTooManyRoutes,
                       "at most " + std::to_string(kMaxRoutesPerAttach) + " routes per attach",
                       kClosePolicyViolation};
  }

  const json* type = member(doc, "type");
  if (type == nullptr || !type->is_string() || type->get_ref<const std::string&>() != "attach") {
    return malformed("the first message must have type \"attach\"");
  }
  const json* token = member(doc, "token");
  if (token == nullptr || !token->is_string()) return malformed("token must be a string");

  AttachRequest attach;
  if (const json* value = member(doc, "max_conns")) {
    const auto n = asUnsigned(*value);
    if (!n || *n == 0) return malformed("max_conns must be an integer of at least 1");
    attach.maxConns = static_cast<uint32_t>(std::min<uint64_t>(*n, kMaxConnsPerBridge));
  }
  if (const json* value = member(doc, "window")) {
    const auto n = unsignedInRange(*value, kMinWindow, kMaxWindow);
    if (!n) return malformed("window must be an integer from 65536 to 16777216");
    attach.window = *n;
  }
  auto origin = optionalName(doc, "origin");
  if (!origin) return malformed("origin must be 1-64 of A-Z a-z 0-9 . _ -");
  attach.origin = std::move(*origin);
  auto profile = optionalName(doc, "profile");
  if (!profile) return malformed("profile must be 1-64 of A-Z a-z 0-9 . _ -");
  attach.profile = std::move(*profile);
  if (const json* value = member(doc, "profile_index")) {
    const auto n = unsignedInRange(*value, 0, kMaxProfiles - 1);
    if (!n) return malformed("profile_index must be an integer from 0 to 7");
    attach.profileIndex = *n;
  }

  if (routes != nullptr) {
    if (!routes->is_array()) return malformed("routes must be an array of strings");
    auto normalized = normalizeRoutes(*routes);
    if (normalized.ok()) {
      attach.routes = std::move(normalized).value();
    } else {
      attach.routes.clear();
      attach.routeError = normalized.error().message;
    }
  }

  const auto& tokenText = token->get_ref<const std::string&>();
  if (!isValidToken(tokenText)) {
    return AttachError{AttachErrorCode::kBadToken, "bad token", kClosePolicyViolation};
  }
  attach.token = tokenText;
  return attach;
}

std::string serializeAttach(const AttachRequest& attach) {
  ordered_json doc;
  doc["type"] = "attach";
  doc["token"] = attach.token;
  doc["routes"] = attach.routes;
  doc["max_conns"] = attach.maxConns;
  if (!attach.origin.empty()) doc["origin"] = attach.origin;
  if (!attach.profile.empty()) doc["profile"] = attach.profile;
  if (attach.profileIndex != 0) doc["profile_index"] = attach.profileIndex;
  doc["window"] = attach.window;
  return dump(doc);
}

std::string serializeAttached(const Attached& attached) {
  ordered_json doc;
  doc["type"] = "attached";
  doc["bridge_id"] = attached.bridgeId;
  doc["limits"]["max_conns"] = attached.limits.maxConns;
  doc["limits"]["max_payload"] = attached.limits.maxPayload;
  doc["limits"]["window"] = attached.limits.window;
  doc["heartbeat_ms"] = attached.heartbeatMs;
  if (attached.protocol > 1) doc["protocol"] = attached.protocol;
  return dump(doc);
}

std::string serializeAttachError(const AttachError& error) {
  ordered_json doc;
  doc["type"] = "attach_error";
  doc["code"] = attachErrorCodeName(error.code);
  doc["message"] = error.message;
  return dump(doc);
}

std::string serializeDrain() {
  return R"({"type":"drain"})";
}

Decoded<RelayMessage, RelayMessageError> parseRelayMessage(std::string_view text) {
  const json doc = json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded()) return RelayMessageError::kNotJson;
  if (!doc.is_object()) return RelayMessageError::kNotObject;
  const json* type = member(doc, "type");
  if (type == nullptr || !type->is_string()) return RelayMessageError::kBadField;
  const auto& name = type->get_ref<const std::string&>();
  if (name == "attached") return parseAttached(doc);
  if (name == "attach_error") return parseAttachError(doc);
  if (name == "drain") return RelayMessage(Drain{});
  return RelayMessageError::kUnknownType;
}

std::string serializeStatus(const StatusReport& report) {
  ordered_json profiles = ordered_json::array();
  const size_t count = std::min<size_t>(report.profiles.size(), kMaxProfiles);
  for (size_t i = 0; i < count; ++i) {
    const ProfileReport& profile = report.profiles[i];
    ordered_json entry;
    entry["name"] = isValidName(profile.name) ? profile.name : std::string();
    entry["index"] = std::min<uint32_t>(profile.index, kMaxProfiles - 1);
    entry["links_wanted"] = std::min<uint32_t>(profile.linksWanted, 1024);
    entry["links_up"] = std::min<uint32_t>(profile.linksUp, 1024);
    entry["next_try_ms"] = std::min<uint64_t>(profile.nextTryMs, 24ULL * 3600 * 1000);
    entry["last_error"] = truncatedUtf8(profile.lastError, kMaxStatusErrorLength);
    profiles.push_back(std::move(entry));
  }
  ordered_json doc;
  doc["type"] = "status";
  doc["profiles"] = std::move(profiles);
  return dump(doc);
}

Decoded<StatusReport, ClientMessageError> parseAttachedClientMessage(std::string_view text) {
  if (text.size() > kMaxStatusMessageBytes) return ClientMessageError::kTooLarge;
  const json doc = json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded()) return ClientMessageError::kNotJson;
  if (!doc.is_object()) return ClientMessageError::kNotObject;
  const json* type = member(doc, "type");
  if (type == nullptr || !type->is_string() || type->get_ref<const std::string&>() != "status") {
    return ClientMessageError::kUnknownType;
  }
  const json* profiles = member(doc, "profiles");
  if (profiles == nullptr || !profiles->is_array() || profiles->size() > kMaxProfiles) {
    return ClientMessageError::kBadField;
  }
  StatusReport report;
  for (const auto& item : *profiles) {
    auto profile = parseProfileReport(item);
    if (!profile) return ClientMessageError::kBadField;
    report.profiles.push_back(std::move(*profile));
  }
  return report;
}

}  // namespace ot::bridge
