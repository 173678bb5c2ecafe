// The stored tunnel record: what controld keeps per tunnel in the tunnels table's `record`
// column (JSON, keys in a fixed order so rows compare byte for byte). The revision and derived
// columns (deleted, issuing, alarm_at) live beside it in the row, not in the JSON.
// Pure: no I/O. Thread-compatible value type.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "controld/base/direct_target.h"

namespace ot::controld {

enum class CertificateState { kNone, kIssuing, kReady, kFailed };
[[nodiscard]] const char* certificateStateName(CertificateState state);
[[nodiscard]] std::optional<CertificateState> parseCertificateState(std::string_view name);

struct CertificateInfo {
  std::string id;  // names the issuance job; a new CSR gets a new id
  CertificateState state = CertificateState::kNone;
  std::string csrPem;
  // SHA-256 of the CSR's DER (CsrInfo::der_sha256_hex): binding the same CSR again is recognised
  // whatever its PEM line breaks, and answers as before instead of starting a new issuance.
  std::string csrSha256;
  std::vector<std::string> identifiers;  // <id>.<domain> and optionally *.<id>.<domain>
  std::string chainPem;                  // leaf first; empty until ready
  int64_t notAfterMs = 0;                // of the leaf; 0 until ready
  int64_t requestedAtMs = 0;
  std::string error;  // the last failure, for the API and logs
  bool operator==(const CertificateInfo&) const = default;
};

// One named origin of a tunnel's pool (docs/pools-origins.md). Its credential is derived, never
// stored. `direct`: the relays dial it (direct mode, docs/pools-direct.md); written to the JSON
// only when set, so records from before direct mode keep their exact text.
struct OriginEntry {
  std::string name;
  int64_t addedAtMs = 0;
  std::optional<DirectTarget> direct{};
  bool operator==(const OriginEntry&) const = default;
};

// How visitors are spread over an origin's profiles and links (relayd decides; stored here).
enum class Balancing { kSpread, kPriority };
[[nodiscard]] const char* balancingName(Balancing balancing);
[[nodiscard]] std::optional<Balancing> parseBalancing(std::string_view name);

inline constexpr int64_t kDefaultStickyHoldMs = 10000;
inline constexpr int64_t kMaxStickyHoldMs = 600000;

struct TunnelRecord {
  std::string id;
  std::string hostname;        // <id>.<domain>
  std::string tokenSha256Hex;  // the token itself is returned once at creation, never stored
  int64_t createdAtMs = 0;
  // Informational only: the API computes a tunnel's state from relayd's live bridges.
  std::optional<int64_t> lastConnectedAtMs;
  CertificateInfo certificate;
  std::optional<int64_t> renewAtMs;  // the renewal alarm (mirrored in the alarm_at column)
  std::optional<int64_t> deletedAtMs;
  // The pool. Each member is written to the JSON only when it is not the default, so records
  // written before pools existed stay byte for byte the same.
  std::vector<OriginEntry> origins;  // at most kMaxOriginsPerTunnel, names unique, oldest first
  uint64_t credentialGeneration = 0;
  Balancing balancing = Balancing::kSpread;
  int64_t stickyHoldMs = kDefaultStickyHoldMs;
  bool operator==(const TunnelRecord&) const = default;

  [[nodiscard]] bool deleted() const { return deletedAtMs.has_value(); }
  [[nodiscard]] bool issuing() const { return certificate.state == CertificateState::kIssuing; }
};

// Whether any origin of the record has a direct target (the relays dial it).
[[nodiscard]] bool hasDirectOrigin(const TunnelRecord& record);

[[nodiscard]] std::string toJson(const TunnelRecord& record);
// Reads what toJson writes. Pool members are checked only for type here; their rules (valid and
// unique names, limits) are checkPool's.
[[nodiscard]] Result<TunnelRecord> tunnelRecordFromJson(std::string_view json);

// Why the record's pool breaks its rules (names valid and unique, at most kMaxOriginsPerTunnel,
// stickyHoldMs within 0..kMaxStickyHoldMs, direct targets as checkDirectTarget wants them);
// nullopt when it keeps them.
[[nodiscard]] std::optional<std::string> checkPool(const TunnelRecord& record);

// A tunnel ID is one DNS label: 1-63 of [a-z0-9-], not starting or ending with '-'.
[[nodiscard]] bool isValidTunnelId(std::string_view id);
// A fresh random ID: 12 characters of [a-z0-9] starting with a letter (about 60 bits).
[[nodiscard]] std::string newTunnelId();

}  // namespace ot::controld
