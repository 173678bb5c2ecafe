#include "controld/store/tunnel_record.h"

#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>

#include "common/bridge_frame.h"
#include "controld/base/origin_credentials.h"

namespace ot::controld {
namespace {

using Json = nlohmann::ordered_json;

std::optional<std::string> getString(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

// Present and an integer, present and null (-> nullopt), or absent (-> nullopt).
bool getOptionalInt(const Json& object, const char* key, std::optional<int64_t>& out) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    out.reset();
    return true;
  }
  if (!it->is_number_integer()) return false;
  out = it->get<int64_t>();
  return true;
}

Error invalid(std::string message) {
  return Error{ErrorKind::kInvalid, std::move(message)};
}

Json nullable(const std::optional<int64_t>& value) {
  return value ? Json(*value) : Json(nullptr);
}

Status readPool(const Json& json, TunnelRecord& r) {
  const auto origins = json.find("origins");
  if (origins != json.end()) {
    if (!origins->is_array()) return invalid("tunnel record origins is not an array");
    for (const auto& item : *origins) {
      if (!item.is_object()) return invalid("tunnel record origin is not an object");
      auto name = getString(item, "name");
      const auto added = item.find("addedAt");
      if (!name || added == item.end() || !added->is_number_integer()) {
        return invalid("tunnel record origin lacks name or addedAt");
      }
      OriginEntry entry{std::move(*name), added->get<int64_t>()};
      if (const auto direct = item.find("direct"); direct != item.end()) {
        const auto address = direct->is_object() ? direct->find("address") : direct->end();
        const auto links = direct->is_object() ? direct->find("links") : direct->end();
        if (address == direct->end() || !address->is_string() || links == direct->end() ||
            !links->is_number_unsigned() || links->get<uint64_t>() > kMaxDirectLinks) {
          return invalid("tunnel record origin's direct needs an address and links up to " +
                         std::to_string(kMaxDirectLinks));
        }
        entry.direct = DirectTarget{address->get<std::string>(), links->get<uint32_t>()};
      }
      r.origins.push_back(std::move(entry));
    }
  }
  const auto generation = json.find("credentialGeneration");
  if (generation != json.end()) {
    if (!generation->is_number_unsigned()) {
      return invalid("tunnel record credentialGeneration is not an unsigned integer");
    }
    r.credentialGeneration = generation->get<uint64_t>();
  }
  const auto balancing = json.find("balancing");
  if (balancing != json.end()) {
    auto parsed =
        balancing->is_string() ? parseBalancing(balancing->get<std::string>()) : std::nullopt;
    if (!parsed) return invalid("tunnel record balancing is neither spread nor priority");
    r.balancing = *parsed;
  }
  const auto hold = json.find("stickyHoldMs");
  if (hold != json.end()) {
    if (!hold->is_number_integer()) return invalid("tunnel record stickyHoldMs is not an integer");
    r.stickyHoldMs = hold->get<int64_t>();
  }
  return Ok{};
}

}  // namespace

const char* certificateStateName(CertificateState state) {
  switch (state) {
    case CertificateState::kNone:
      return "none";
    case CertificateState::kIssuing:
      return "issuing";
    case CertificateState::kReady:
      return "ready";
    case CertificateState::kFailed:
      return "failed";
  }
  return "none";
}

std::optional<CertificateState> parseCertificateState(std::string_view name) {
  for (auto state : {CertificateState::kNone, CertificateState::kIssuing, CertificateState::kReady,
                     CertificateState::kFailed}) {
    if (name == certificateStateName(state)) return state;
  }
  return std::nullopt;
}

const char* balancingName(Balancing balancing) {
  return balancing == Balancing::kPriority ? "priority" : "spread";
}

std::optional<Balancing> parseBalancing(std::string_view name) {
  if (name == "spread") return Balancing::kSpread;
  if (name == "priority") return Balancing::kPriority;
  return std::nullopt;
}

std::optional<std::string> checkPool(const TunnelRecord& record) {
  if (record.origins.size() > kMaxOriginsPerTunnel) {
    return "more than " + std::to_string(kMaxOriginsPerTunnel) + " origins";
  }
  std::set<std::string> seen;
  for (const OriginEntry& origin : record.origins) {
    if (!isValidOriginName(origin.name)) return "origin name \"" + origin.name + "\" is not valid";
    if (!seen.insert(origin.name).second) return "origin " + origin.name + " is listed twice";
    if (origin.direct) {
      if (auto broken = checkDirectTarget(*origin.direct)) {
        return "origin " + origin.name + ": " + *broken;
      }
    }
  }
  if (record.stickyHoldMs < 0 || record.stickyHoldMs > kMaxStickyHoldMs) {
    return "stickyHoldMs is outside 0.." + std::to_string(kMaxStickyHoldMs);
  }
  return std::nullopt;
}

std::string toJson(const TunnelRecord& r) {
  Json cert = {
      {"id", r.certificate.id},
      {"state", certificateStateName(r.certificate.state)},
      {"csr", r.certificate.csrPem},
      {"csrSha256", r.certificate.csrSha256},
      {"identifiers", r.certificate.identifiers},
      {"chain", r.certificate.chainPem},
      {"notAfter", r.certificate.notAfterMs},
      {"requestedAt", r.certificate.requestedAtMs},
      {"error", r.certificate.error},
  };
  Json json = {
      {"id", r.id},
      {"hostname", r.hostname},
      {"tokenHash", r.tokenSha256Hex},
      {"createdAt", r.createdAtMs},
      {"lastConnectedAt", nullable(r.lastConnectedAtMs)},
      {"certificate", std::move(cert)},
      {"renewAt", nullable(r.renewAtMs)},
      {"deletedAt", nullable(r.deletedAtMs)},
  };
  // Appended only when set: a record without a pool keeps the exact text it always had.
  if (!r.origins.empty()) {
    Json origins = Json::array();
    for (const OriginEntry& origin : r.origins) {
      Json entry{{"name", origin.name}, {"addedAt", origin.addedAtMs}};
      if (origin.direct) {
        entry["direct"] =
            Json{{"address", origin.direct->address}, {"links", origin.direct->links}};
      }
      origins.push_back(std::move(entry));
    }
    json["origins"] = std::move(origins);
  }
  if (r.credentialGeneration != 0) json["credentialGeneration"] = r.credentialGeneration;
  if (r.balancing != Balancing::kSpread) json["balancing"] = balancingName(r.balancing);
  if (r.stickyHoldMs != kDefaultStickyHoldMs) json["stickyHoldMs"] = r.stickyHoldMs;
  return json.dump();
}

Result<TunnelRecord> tunnelRecordFromJson(std::string_view text) {
  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object())
    return invalid("tunnel record is not a JSON object");

  TunnelRecord r;
  auto id = getString(json, "id");
  auto hostname = getString(json, "hostname");
  auto token = getString(json, "tokenHash");
  if (!id || !hostname || !token) return invalid("tunnel record lacks id, hostname or tokenHash");
  r.id = std::move(*id);
  r.hostname = std::move(*hostname);
  r.tokenSha256Hex = std::move(*token);
  std::optional<int64_t> created;
  if (!getOptionalInt(json, "createdAt", created) ||
      !getOptionalInt(json, "lastConnectedAt", r.lastConnectedAtMs) ||
      !getOptionalInt(json, "renewAt", r.renewAtMs) ||
      !getOptionalInt(json, "deletedAt", r.deletedAtMs)) {
    return invalid("tunnel record has a non-integer time");
  }
  r.createdAtMs = created.value_or(0);

  const auto certIt = json.find("certificate");
  if (certIt != json.end() && !certIt->is_null()) {
    const Json& cert = *certIt;
    if (!cert.is_object()) return invalid("tunnel record certificate is not an object");
    auto state = parseCertificateState(getString(cert, "state").value_or("none"));
    if (!state) return invalid("tunnel record has an unknown certificate state");
    r.certificate.state = *state;
    r.certificate.id = getString(cert, "id").value_or("");
    r.certificate.csrPem = getString(cert, "csr").value_or("");
    r.certificate.csrSha256 = getString(cert, "csrSha256").value_or("");
    r.certificate.chainPem = getString(cert, "chain").value_or("");
    r.certificate.error = getString(cert, "error").value_or("");
    std::optional<int64_t> notAfter, requestedAt;
    if (!getOptionalInt(cert, "notAfter", notAfter) ||
        !getOptionalInt(cert, "requestedAt", requestedAt)) {
      return invalid("tunnel record certificate has a non-integer time");
    }
    r.certificate.notAfterMs = notAfter.value_or(0);
    r.certificate.requestedAtMs = requestedAt.value_or(0);
    const auto ids = cert.find("identifiers");
    if (ids != cert.end() && !ids->is_null()) {
      if (!ids->is_array()) return invalid("certificate identifiers is not an array");
      for (const auto& name : *ids) {
        if (!name.is_string()) return invalid("certificate identifier is not a string");
        r.certificate.identifiers.push_back(name.get<std::string>());
      }
    }
  }
  if (auto pool = readPool(json, r); !pool.ok()) return pool.error();
  return r;
}

bool isValidTunnelId(std::string_view id) {
  return bridge::isDnsLabel(id);
}

std::string newTunnelId() {
  static constexpr std::string_view kLetters = "abcdefghijklmnopqrstuvwxyz";
  static constexpr std::string_view kAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  std::array<unsigned char, 12> random{};
  if (RAND_bytes(random.data(), static_cast<int>(random.size())) != 1) std::abort();
  std::string id;
  id.reserve(random.size());
  // 256 is not a multiple of 26 or 36; the bias (< 1%) does not matter for an identifier whose
  // uniqueness the database enforces anyway.
  id.push_back(kLetters[random[0] % kLetters.size()]);
  for (size_t i = 1; i < random.size(); ++i) id.push_back(kAlphabet[random[i] % kAlphabet.size()]);
  return id;
}

bool hasDirectOrigin(const TunnelRecord& record) {
  return std::any_of(record.origins.begin(), record.origins.end(),
                     [](const OriginEntry& origin) { return origin.direct.has_value(); });
}

}  // namespace ot::controld
