// Which credential may attach a bridge to a tunnel (docs/pools-origins.md): the tunnel token under
// any origin name, or a listed origin's derived credential under that origin's name only. Pure;
// any thread.
#pragma once

#include <optional>
#include <string_view>

#include "controld/base/origin_credentials.h"
#include "controld/store/tunnel_record.h"

namespace ot::controld {

// tokenSha256: the 32 bytes of the tunnel token's SHA-256. presented: what the attach carried.
// secret: nullopt accepts the tunnel token alone. Every comparison is constant time.
[[nodiscard]] bool attachCredentialAccepted(const TunnelRecord& record,
                                            std::string_view tokenSha256, std::string_view origin,
                                            std::string_view presented,
                                            const std::optional<OriginSecret>& secret);

}  // namespace ot::controld
