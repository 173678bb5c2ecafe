// Derived origin credentials (docs/pools-origins.md): an origin's credential is computed from
// controld's secret, the tunnel ID, the origin name and the tunnel's credential generation, and is
// never stored. relayd sees only its SHA-256 (TunnelRecord.origins).
//
// The secret is loaded once at startup (origin_secret.h) and installed here for the parts that
// build records for relayd and check attaches; those run on many threads and were written before
// pools, so they read it from one process-wide place instead of having it threaded through every
// constructor. Pure apart from that one value; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ot::controld {

inline constexpr size_t kOriginSecretSize = 32;
using OriginSecret = std::array<uint8_t, kOriginSecretSize>;

// At most this many named origins per tunnel.
inline constexpr size_t kMaxOriginsPerTunnel = 32;

// An origin name: 1-64 of A-Za-z0-9._- (the attach's `origin`).
[[nodiscard]] bool isValidOriginName(std::string_view name);

// "oc_" + base64url (no padding) of HMAC-SHA256(secret, "opentunnel-origin-v1\0" + tunnelId +
// "\0" + origin + "\0" + decimal generation): 46 characters.
[[nodiscard]] std::string deriveOriginCredential(const OriginSecret& secret,
                                                 std::string_view tunnelId, std::string_view origin,
                                                 uint64_t generation);

// Whether `presented` is that credential, compared in constant time.
[[nodiscard]] bool originCredentialMatches(const OriginSecret& secret, std::string_view tunnelId,
                                           std::string_view origin, uint64_t generation,
                                           std::string_view presented);

// The process's secret: set once by controld after its database is ready (tests set their own).
void installOriginSecret(const OriginSecret& secret);
// The installed secret; nullopt before installOriginSecret (then no derived credential works and
// records carry no origins).
[[nodiscard]] std::optional<OriginSecret> installedOriginSecret();

}  // namespace ot::controld
