#include "common/route_check_auth.h"

#include <cassert>

#include "common/machine_identity.h"

namespace ot::mesh {
namespace {

Proof routeCheckProof(std::string_view secret, const SignedEnvelope& envelope,
                      std::string_view method, std::string_view path) {
  const std::string time = std::to_string(envelope.timeMs);
  const std::string nonce = nonceToHex(envelope.nonce);
  return meshMac(secret,
                 {kRouteCheckLabel, envelope.sender, envelope.receiver, time, nonce, method, path});
}

}  // namespace

bool signableRequest(std::string_view method, std::string_view path) {
  if (method.empty() || method.size() > 16) return false;
  for (const char c : method) {
    if (c < 'A' || c > 'Z') return false;
  }
  if (path.empty() || path.size() > kMaxSignedPath || path[0] != '/') return false;
  for (const char c : path) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x21 || byte > 0x7e) return false;
  }
  return true;
}

std::optional<std::string> buildRouteCheckAuth(std::string_view secret,
                                               const SignedEnvelope& envelope,
                                               std::string_view method, std::string_view path) {
  if (!validMachineName(envelope.sender) || !validMachineName(envelope.receiver) ||
      !parseTimeMs(std::to_string(envelope.timeMs)) || !signableRequest(method, path)) {
    return std::nullopt;
  }
  return formatSignedLine(kRouteCheckVersion,
                          {envelope.sender, envelope.receiver, std::to_string(envelope.timeMs),
                           nonceToHex(envelope.nonce)},
                          routeCheckProof(secret, envelope, method, path));
}

ProofResult<SignedRouteCheck> parseRouteCheckAuth(std::string_view value) {
  if (value.size() >= kMaxHeaderLine) return ProofError::kLineTooLong;
  auto parsed = parseSignedLine(value, kRouteCheckVersion, "OPENTUNNEL-AUTH");
  if (!parsed) return parsed.error();
  return SignedRouteCheck{std::move(parsed->envelope), parsed->proof};
}

ProofResult<SignedEnvelope> verifyRouteCheckAuth(std::string_view value, std::string_view method,
                                                 std::string_view path, std::string_view secret,
                                                 std::string_view ownMachineId, int64_t nowMs,
                                                 const LinkedSenderCheck& isLinkedSender,
                                                 NonceWindow& window) {
  assert(isLinkedSender);
  auto parsed = parseRouteCheckAuth(value);
  if (!parsed) return parsed.error();
  if (!signableRequest(method, path)) return ProofError::kBadRequest;
  const SignedEnvelope& envelope = parsed->envelope;
  if (const auto error = checkEnvelope(envelope, ownMachineId, nowMs)) return *error;
  if (!isLinkedSender(envelope.sender)) return ProofError::kNotLinked;
  const Proof expected = routeCheckProof(secret, envelope, method, path);
  if (!crypto::constantTimeEqual(expected, parsed->proof)) return ProofError::kBadProof;
  const auto admit = window.admit(envelope.nonce, envelope.timeMs, nowMs);
  if (admit != NonceWindow::Admit::kFresh) return admitError(admit);
  return std::move(parsed).value().envelope;
}

}  // namespace ot::mesh
