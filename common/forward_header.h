// The header a relayd puts in front of a forwarded visitor (docs/mesh.md "Proofs and signed
// headers"): one line naming sender, receiver, time, nonce, tunnel, route and visitor address,
// signed with INTERNAL_TOKEN, followed by the visitor's buffered ClientHello.
//
//   OPENTUNNEL-FORWARD/2 <sender> <receiver> <time> <nonce> <tunnel> <route> <visitor> <proof>\n
//   OPENTUNNEL-FORWARD/2 <sender> ... <visitor> <origin> <proof>\n      (an origin was chosen)
//
// <route> and <visitor> are "-" for the bare hostname and an unknown address. <proof> is
// meshMac(secret, {"OPENTUNNEL-FORWARD/2", sender, receiver, time, nonce, tunnel, route, visitor})
// over the fields exactly as they appear on the line ("-" included), <origin> last when present.
//
// Pure. The sender's relayd calls buildForwardHeader on its loop; the receiver's relayd scans the
// first bytes of an internal connection with scanLine (common/mesh_proof.h: 1 KiB within 10 s is
// the listener's rule) and passes the line to verifyForwardHeader with its NonceWindow, on its
// loop.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/mesh_proof.h"
#include "common/nonce_window.h"

namespace ot::mesh {

inline constexpr std::string_view kForwardVersion = "OPENTUNNEL-FORWARD/2";
inline constexpr std::string_view kForwardLabel = "OPENTUNNEL-FORWARD/2";

struct ForwardHeader {
  SignedEnvelope envelope;     // sender, receiver, time, nonce
  std::string tunnelId;        // one DNS label (as our tunnel IDs)
  std::string route;           // "" (bare hostname) or one DNS label (bridge::isValidRoute)
  std::string visitorAddress;  // "" (unknown), "a.b.c.d:port" or "[v6]:port"
  // The origin the sender chose for the visitor (docs/pools-mesh.md); "" sends the line without
  // it, as relays before origins wrote it. 1-64 of [A-Za-z0-9._-].
  std::string origin;
  bool operator==(const ForwardHeader&) const = default;
};

// The line, newline included; nullopt when a field is not well-formed (the checks of
// parseForwardHeader), so a sender never emits what a receiver would refuse for its shape.
[[nodiscard]] std::optional<std::string> buildForwardHeader(std::string_view secret,
                                                            const ForwardHeader& header);

// Syntax only, of a line without its newline: the fields and their shapes, no MAC, no clock.
// Returns the header and the proof it carries. For the fuzz target and for logs of refusals.
struct SignedForward {
  ForwardHeader header;
  Proof proof{};
};
[[nodiscard]] ProofResult<SignedForward> parseForwardHeader(std::string_view line);

// "Is this machine linked now, and does the connection come from its linked address?" The caller
// (relayd, from the table controld gave it, and the connection's peer address) answers it; the
// verifier asks it only for a well-formed header addressed to this machine.
using LinkedSenderCheck = std::function<bool(std::string_view senderMachineId)>;

// The receiver's checks, in order: syntax; addressed to ownMachineId and not from it; signed
// within kSignedHeaderValidityMs of nowMs; isLinkedSender(sender); the proof (constant time);
// the nonce admitted by `window` (recorded only when every other check passed).
[[nodiscard]] ProofResult<ForwardHeader> verifyForwardHeader(
    std::string_view line, std::string_view secret, std::string_view ownMachineId, int64_t nowMs,
    const LinkedSenderCheck& isLinkedSender, NonceWindow& window);

}  // namespace ot::mesh
