#include "controld/store/tunnel_record.h"

#include <openssl/rand.h>

#include <array>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/bridge_frame.h"

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

}  // namespace ot::controld
