// The mesh link's challenge and response (docs/mesh.md "Proofs and signed headers"): both ends
// prove they hold INTERNAL_TOKEN without sending it. Pure state machines, one per role, fed the
// bytes as they arrive; owned by controld's mesh link loop (one per link being set up, on its
// loop thread). The caller owns the socket, the kPreAuthTimeoutMs deadline and the
// kMaxPreAuthConnections cap (common/mesh_proof.h).
//
//   dialer   -> OPENTUNNEL-MESH/2 <dialer machine> <dialer nonce>\n
//   acceptor -> OPENTUNNEL-MESH/2 <acceptor machine> <acceptor nonce> <acceptor proof>\n
//   dialer   -> <dialer proof>\n
//
// Each proof is meshMac(secret, {label, role, dialer machine, acceptor machine, dialer nonce,
// acceptor nonce}) with the role "accept" or "dial", checked in constant time. A peer without the
// secret learns only a proof bound to a nonce of ours it cannot choose again.
//
// What the proof does not settle, and the caller must: the hello that follows must name the
// machine that proved itself (peerMachineId()), its address must be the connection's (or the
// dialed one: MESH_VERIFY_ADDRESS, which is what stops a relay between two real machines), and a
// machine ID already linked from elsewhere is refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/mesh_proof.h"

namespace ot::mesh {

inline constexpr std::string_view kMeshVersion = "OPENTUNNEL-MESH/2";
inline constexpr std::string_view kHandshakeLabel = "OPENTUNNEL-MESH/2";
inline constexpr std::string_view kRoleAccept = "accept";
inline constexpr std::string_view kRoleDial = "dial";

// What the link has reached after a feed.
enum class HandshakeState : uint8_t {
  kNeedMore,  // send `send` (if any), then wait for more bytes
  kProven,  // send `send` (if any): the peer holds the secret; leftover() is the link's first bytes
  kRefused,  // close the connection (send nothing); error() says why
};

struct HandshakeStep {
  HandshakeState state = HandshakeState::kNeedMore;
  std::string send;  // bytes to write to the peer, in order, before anything else
};

// The proof both sides compute; exposed so tests can show what a peer could and could not forge.
[[nodiscard]] Proof handshakeProof(std::string_view secret, std::string_view role,
                                   std::string_view dialerId, std::string_view acceptorId,
                                   const Nonce& dialerNonce, const Nonce& acceptorNonce);

// Shared by both roles: the buffered bytes, the outcome.
class HandshakeBase {
 public:
  [[nodiscard]] HandshakeState state() const { return state_; }
  [[nodiscard]] ProofError error() const { return error_; }
  // Once kProven: the peer's machine ID.
  [[nodiscard]] const std::string& peerMachineId() const { return peerId_; }
  // Once kProven: bytes that came after the handshake's last line (the start of the frames), for
  // the caller to hand to the frame reader.
  [[nodiscard]] std::string takeLeftover() { return std::move(buffer_); }

 protected:
  HandshakeBase(std::string secret, std::string ownId, const Nonce& ownNonce)
      : secret_(std::move(secret)), ownId_(std::move(ownId)), ownNonce_(ownNonce) {}
  HandshakeStep refuse(ProofError error);
  // The next complete line (without its newline), taken off the buffer. kTooLong and kNeedMore
  // leave `line` empty.
  [[nodiscard]] LineStatus takeLine(std::string& line);
  // Checks the version field and the peer's ID (well-formed, not ours).
  [[nodiscard]] std::optional<ProofError> checkPeerHello(std::string_view version,
                                                         std::string_view machineId) const;

  std::string secret_;
  std::string ownId_;
  Nonce ownNonce_;
  std::string peerId_;
  Nonce peerNonce_{};
  std::string buffer_;
  HandshakeState state_ = HandshakeState::kNeedMore;
  ProofError error_ = ProofError::kBadLine;
};

class MeshDialer : public HandshakeBase {
 public:
  // `nonce`: randomNonce() (tests pass a fixed one). `ownId` must be validMachineName.
  MeshDialer(std::string secret, std::string ownId, const Nonce& nonce)
      : HandshakeBase(std::move(secret), std::move(ownId), nonce) {}
  // The first line to send, at once after connecting.
  [[nodiscard]] std::string openingLine() const;
  // Bytes from the acceptor. After kProven or kRefused, further calls change nothing.
  [[nodiscard]] HandshakeStep feed(std::string_view bytes);
};

class MeshAcceptor : public HandshakeBase {
 public:
  MeshAcceptor(std::string secret, std::string ownId, const Nonce& nonce)
      : HandshakeBase(std::move(secret), std::move(ownId), nonce) {}
  // Bytes from the dialer, the first line included. After kProven or kRefused, further calls
  // change nothing.
  [[nodiscard]] HandshakeStep feed(std::string_view bytes);

 private:
  bool answered_ = false;
};

}  // namespace ot::mesh
