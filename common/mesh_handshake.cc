#include "common/mesh_handshake.h"

#include "common/machine_identity.h"

namespace ot::mesh {
namespace {

// The version field of a first line: ours, another OPENTUNNEL-MESH (an old or future handshake),
// or something that is no mesh handshake at all.
std::optional<ProofError> checkVersion(std::string_view line) {
  const std::string_view first = line.substr(0, line.find(' '));
  if (first == kMeshVersion) return std::nullopt;
  if (first.starts_with("OPENTUNNEL-MESH")) return ProofError::kWrongVersion;
  return ProofError::kBadLine;
}

}  // namespace

Proof handshakeProof(std::string_view secret, std::string_view role, std::string_view dialerId,
                     std::string_view acceptorId, const Nonce& dialerNonce,
                     const Nonce& acceptorNonce) {
  const std::string dialerNonceHex = nonceToHex(dialerNonce);
  const std::string acceptorNonceHex = nonceToHex(acceptorNonce);
  return meshMac(secret,
                 {kHandshakeLabel, role, dialerId, acceptorId, dialerNonceHex, acceptorNonceHex});
}

HandshakeStep HandshakeBase::refuse(ProofError error) {
  state_ = HandshakeState::kRefused;
  error_ = error;
  buffer_.clear();
  peerId_.clear();
  return {HandshakeState::kRefused, {}};
}

LineStatus HandshakeBase::takeLine(std::string& line) {
  const LineScan scan = scanLine(buffer_);
  if (scan.status == LineStatus::kComplete) {
    line.assign(buffer_, 0, scan.length);
    buffer_.erase(0, scan.length + 1);
  }
  return scan.status;
}

std::optional<ProofError> HandshakeBase::checkPeerHello(std::string_view version,
                                                        std::string_view machineId) const {
  if (version != kMeshVersion) return ProofError::kWrongVersion;
  if (!validMachineName(machineId)) return ProofError::kBadMachineId;
  if (machineId == ownId_) return ProofError::kOwnMachineId;
  return std::nullopt;
}

std::string MeshDialer::openingLine() const {
  std::string line(kMeshVersion);
  line += ' ';
  line += ownId_;
  line += ' ';
  line += nonceToHex(ownNonce_);
  line += '\n';
  return line;
}

HandshakeStep MeshDialer::feed(std::string_view bytes) {
  if (state_ != HandshakeState::kNeedMore) return {state_, {}};
  buffer_.append(bytes);
  std::string line;
  const LineStatus status = takeLine(line);
  if (status == LineStatus::kTooLong) return refuse(ProofError::kLineTooLong);
  if (status == LineStatus::kNeedMore) return {HandshakeState::kNeedMore, {}};

  if (const auto error = checkVersion(line)) return refuse(*error);
  const auto fields = splitFields<4>(line);
  if (!fields) return refuse(ProofError::kBadLine);
  const auto& [version, machineId, nonceHex, proofHex] = *fields;
  if (const auto error = checkPeerHello(version, machineId)) return refuse(*error);
  const auto nonce = nonceFromHex(nonceHex);
  if (!nonce) return refuse(ProofError::kBadNonce);
  const auto proof = proofFromHex(proofHex);
  if (!proof) return refuse(ProofError::kBadProofSyntax);
  const Proof expected = handshakeProof(secret_, kRoleAccept, ownId_, machineId, ownNonce_, *nonce);
  if (!crypto::constantTimeEqual(expected, *proof)) return refuse(ProofError::kBadProof);

  peerId_ = std::string(machineId);
  peerNonce_ = *nonce;
  state_ = HandshakeState::kProven;
  std::string send =
      proofToHex(handshakeProof(secret_, kRoleDial, ownId_, peerId_, ownNonce_, peerNonce_));
  send += '\n';
  return {HandshakeState::kProven, std::move(send)};
}

HandshakeStep MeshAcceptor::feed(std::string_view bytes) {
  if (state_ != HandshakeState::kNeedMore) return {state_, {}};
  buffer_.append(bytes);
  HandshakeStep step;
  std::string line;
  if (!answered_) {
    const LineStatus status = takeLine(line);
    if (status == LineStatus::kTooLong) return refuse(ProofError::kLineTooLong);
    if (status == LineStatus::kNeedMore) return step;

    if (const auto error = checkVersion(line)) return refuse(*error);
    const auto fields = splitFields<3>(line);
    if (!fields) return refuse(ProofError::kBadLine);
    const auto& [version, machineId, nonceHex] = *fields;
    if (const auto error = checkPeerHello(version, machineId)) return refuse(*error);
    const auto nonce = nonceFromHex(nonceHex);
    if (!nonce) return refuse(ProofError::kBadNonce);
    peerId_ = std::string(machineId);
    peerNonce_ = *nonce;
    answered_ = true;

    step.send =
        std::string(kMeshVersion) + ' ' + ownId_ + ' ' + nonceToHex(ownNonce_) + ' ' +
        proofToHex(handshakeProof(secret_, kRoleAccept, peerId_, ownId_, peerNonce_, ownNonce_)) +
        '\n';
  }

  const LineStatus status = takeLine(line);
  if (status == LineStatus::kTooLong) return refuse(ProofError::kLineTooLong);
  if (status == LineStatus::kNeedMore) return step;
  const auto proof = proofFromHex(line);
  if (!proof) return refuse(ProofError::kBadProofSyntax);
  const Proof expected = handshakeProof(secret_, kRoleDial, peerId_, ownId_, peerNonce_, ownNonce_);
  if (!crypto::constantTimeEqual(expected, *proof)) return refuse(ProofError::kBadProof);
  state_ = HandshakeState::kProven;
  step.state = HandshakeState::kProven;
  return step;
}

}  // namespace ot::mesh
