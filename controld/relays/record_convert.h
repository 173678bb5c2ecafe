// controld's stored tunnel record as relayd caches it (the contract's TunnelRecord), the API
// certificate as it is pushed to relayd, and relayd's bridges as the registry holds them. Pure: no
// I/O, no logging; "now" is passed in so tests decide whether a certificate has expired.
// Thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "controld/base/origin_credentials.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/record_publisher.h"
#include "controld/store/store.h"
#include "controld/store/tunnel_record.h"
#include "opentunnel/control/v1/control.pb.h"

namespace ot::controld {

namespace cv1 = ::opentunnel::control::v1;

// Routes one tunnel may hold on this machine over all its bridges when its record sets no limit.
inline constexpr uint32_t kDefaultMaxRoutesPerTunnel = 256;

// The 32 bytes of a hex SHA-256 (either case); nullopt unless it is exactly 64 hex digits.
[[nodiscard]] std::optional<std::string> tokenHashBytes(std::string_view hex);

// Whether visitors can be served: a chain is stored and its leaf has not expired. Independent of
// the state, so it stays true while a renewal is issuing (or after a renewal failed).
[[nodiscard]] bool certificateUsable(const CertificateInfo& certificate, int64_t nowMs);

[[nodiscard]] cv1::CertificateState toProtoState(CertificateState state);

// The record relayd caches. A malformed token hash becomes an empty token_sha256, which matches no
// presented token. Limits are left 0 (the machine's defaults) until records carry their own.
// The pool goes along: each origin with SHA-256 of its credential derived with `secret` (no
// secret: no origins, so relayd accepts only the tunnel token) and its direct target if it has one
// (direct_address, direct_links), balancing, hold and generation.
[[nodiscard]] cv1::TunnelRecord toProtoRecord(const TunnelRecord& record, int64_t revision,
                                              int64_t nowMs,
                                              const std::optional<OriginSecret>& secret);
// As above with the process's installed secret (installedOriginSecret).
[[nodiscard]] cv1::TunnelRecord toProtoRecord(const TunnelRecord& record, int64_t revision,
                                              int64_t nowMs);
[[nodiscard]] inline cv1::TunnelRecord toProtoRecord(const StoredTunnel& tunnel, int64_t nowMs) {
  return toProtoRecord(tunnel.record, tunnel.revision, nowMs);
}

// The API certificate message; the fingerprint is taken from the chain's first certificate.
// kInvalid when the chain holds no certificate.
[[nodiscard]] Result<cv1::ApiCertificate> toProtoCertificate(const ApiCertificatePem& certificate);

// A bridge as relayd reported it, for the registry.
[[nodiscard]] BridgeEntry bridgeEntryFromProto(const cv1::Bridge& bridge);

}  // namespace ot::controld
