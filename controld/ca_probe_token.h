// During a CA cool-down one attempt at a time probes the CA across the whole cluster. A machine
// may claim the probe only when no job is leased on any machine; "look, then claim" is made
// atomic across machines by this short token in meta (kCaProbeMetaKey): whoever holds it does the
// look and the claim, then releases it, and from then on the claimed job's own lease (extended
// while it runs) is what every other machine sees. A holder that dies loses the token when its
// short expiry passes.
//
// The token's value is "<owner> <until_ms>"; a released token has an empty owner.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "controld/store.h"

namespace ot::controld {

inline constexpr const char* kCaProbeMetaKey = "ca_probe";
// Long enough for two store round trips, short enough that a crash costs little.
inline constexpr int64_t kCaProbeTokenMs = 10'000;

struct CaProbeToken {
  std::string owner;  // empty: free
  int64_t until_ms = 0;
  bool operator==(const CaProbeToken&) const = default;
};

// Pure.
[[nodiscard]] std::string encodeCaProbeToken(const CaProbeToken& token);
[[nodiscard]] std::optional<CaProbeToken> decodeCaProbeToken(std::string_view text);

// Takes the token for `owner` until now + kCaProbeTokenMs if it is free, expired, unreadable or
// already `owner`'s. true: taken; false: another machine holds it. Blocks on the store.
Result<bool> takeCaProbeToken(Store& store, const std::string& owner, int64_t now_ms);
// Frees the token if `owner` still holds it; errors are left to the expiry.
void releaseCaProbeToken(Store& store, const std::string& owner, int64_t now_ms);

}  // namespace ot::controld
