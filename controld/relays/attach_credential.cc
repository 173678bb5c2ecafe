#include "controld/relays/attach_credential.h"

#include <algorithm>

#include "common/crypto.h"

namespace ot::controld {

bool attachCredentialAccepted(const TunnelRecord& record, std::string_view tokenSha256,
                              std::string_view origin, std::string_view presented,
                              const std::optional<OriginSecret>& secret) {
  // The tunnel token owns the tunnel: any origin name, as before pools.
  const crypto::Sha256Digest presentedHash = crypto::sha256(presented);
  if (crypto::constantTimeEqual(crypto::asBytes(tokenSha256), presentedHash)) return true;
  // A derived credential: only under its own origin, while that origin is listed, and only for
  // the current generation (rotation and removal revoke it).
  if (!secret || origin.empty()) return false;
  const auto listed = std::find_if(record.origins.begin(), record.origins.end(),
                                   [&](const OriginEntry& entry) { return entry.name == origin; });
  if (listed == record.origins.end()) return false;
  return originCredentialMatches(*secret, record.id, origin, record.credentialGeneration,
                                 presented);
}

}  // namespace ot::controld
