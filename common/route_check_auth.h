// The signature on a route check (controld asking another machine's controld whether it holds a
// tunnel's routes: GET /internal/tunnel/<id>/routes on the internal listener), carried in the
// x-opentunnel-auth header (docs/mesh.md "Proofs and signed headers"):
//
//   x-opentunnel-auth: OPENTUNNEL-AUTH/2 <sender> <receiver> <time> <nonce> <proof>
//
// <proof> is meshMac(secret, {"OPENTUNNEL-AUTH/2", sender, receiver, time, nonce, method, path})
// with the method and the request target exactly as on the request line. Checked with the same
// rules as a forward (common/forward_header.h): addressed to this machine, within 30 s, from a
// machine linked now at its linked address, the nonce never seen.
//
// Pure. controld's route-check client builds it; controld's internal HTTP handler verifies it
// (holding its NonceWindow under a lock if several threads answer).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/forward_header.h"
#include "common/mesh_proof.h"
#include "common/nonce_window.h"

namespace ot::mesh {

inline constexpr std::string_view kRouteCheckHeader = "x-opentunnel-auth";
inline constexpr std::string_view kRouteCheckVersion = "OPENTUNNEL-AUTH/2";
inline constexpr std::string_view kRouteCheckLabel = "OPENTUNNEL-AUTH/2";
// The longest request target signed: a route check's path is ~90 bytes.
inline constexpr size_t kMaxSignedPath = 1024;

// A method is 1-16 of A-Z; a path starts with '/' and is at most kMaxSignedPath bytes of
// 0x21..0x7e.
[[nodiscard]] bool signableRequest(std::string_view method, std::string_view path);

// The header's value (no newline); nullopt when a machine ID, the time or the request cannot be
// signed.
[[nodiscard]] std::optional<std::string> buildRouteCheckAuth(std::string_view secret,
                                                             const SignedEnvelope& envelope,
                                                             std::string_view method,
                                                             std::string_view path);

// Syntax only: the envelope and the proof.
struct SignedRouteCheck {
  SignedEnvelope envelope;
  Proof proof{};
};
[[nodiscard]] ProofResult<SignedRouteCheck> parseRouteCheckAuth(std::string_view value);

// The receiver's checks, in the order verifyForwardHeader makes them; a missing header is the
// caller's (answer 401 as for a bad one).
[[nodiscard]] ProofResult<SignedEnvelope> verifyRouteCheckAuth(
    std::string_view value, std::string_view method, std::string_view path, std::string_view secret,
    std::string_view ownMachineId, int64_t nowMs, const LinkedSenderCheck& isLinkedSender,
    NonceWindow& window);

}  // namespace ot::mesh
