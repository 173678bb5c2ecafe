#include "common/forward_header.h"

#include <cassert>

#include "common/bridge_frame.h"
#include "common/machine_identity.h"

namespace ot::mesh {
namespace {

constexpr std::string_view kNone = "-";

std::string_view orNone(std::string_view value) {
  return value.empty() ? kNone : value;
}

std::string_view fromNone(std::string_view field) {
  return field == kNone ? std::string_view{} : field;
}

std::optional<ProofError> checkPayload(const ForwardHeader& header) {
  if (!bridge::isDnsLabel(header.tunnelId)) return ProofError::kBadTunnel;
  if (!bridge::isValidRoute(header.route)) return ProofError::kBadRoute;
  if (!bridge::isValidVisitorAddress(header.visitorAddress)) return ProofError::kBadAddress;
  return std::nullopt;
}

Proof forwardProof(std::string_view secret, std::string_view sender, std::string_view receiver,
                   std::string_view time, std::string_view nonce, std::string_view tunnel,
                   std::string_view route, std::string_view visitor) {
  return meshMac(secret, {kForwardLabel, sender, receiver, time, nonce, tunnel, route, visitor});
}

}  // namespace

std::optional<std::string> buildForwardHeader(std::string_view secret,
                                              const ForwardHeader& header) {
  const SignedEnvelope& envelope = header.envelope;
  if (!validMachineName(envelope.sender) || !validMachineName(envelope.receiver) ||
      !parseTimeMs(std::to_string(envelope.timeMs)) || checkPayload(header)) {
    return std::nullopt;
  }
  const std::string time = std::to_string(envelope.timeMs);
  const std::string nonce = nonceToHex(envelope.nonce);
  const std::string_view route = orNone(header.route);
  const std::string_view visitor = orNone(header.visitorAddress);
  const Proof proof = forwardProof(secret, envelope.sender, envelope.receiver, time, nonce,
                                   header.tunnelId, route, visitor);
  std::string line = formatSignedLine(
      kForwardVersion,
      {envelope.sender, envelope.receiver, time, nonce, header.tunnelId, route, visitor}, proof);
  line += '\n';
  return line;
}

ProofResult<SignedForward> parseForwardHeader(std::string_view line) {
  const std::string_view first = line.substr(0, line.find(' '));
  if (first != kForwardVersion) {
    return first.starts_with("OPENTUNNEL-FORWARD") ? ProofError::kWrongVersion
                                                   : ProofError::kBadLine;
  }
  const auto fields = splitFields<9>(line);
  if (!fields) return ProofError::kBadLine;
  const auto& f = *fields;
  auto envelope = parseEnvelope(f[1], f[2], f[3], f[4]);
  if (!envelope) return envelope.error();
  SignedForward out;
  out.header.envelope = std::move(envelope).value();
  out.header.tunnelId = std::string(f[5]);
  // "-" is the only spelling of an empty route or address: an empty field cannot be split out,
  // and "-" is neither a DNS label nor an address, so each value has one spelling.
  out.header.route = std::string(fromNone(f[6]));
  out.header.visitorAddress = std::string(fromNone(f[7]));
  if (const auto error = checkPayload(out.header)) return *error;
  const auto proof = proofFromHex(f[8]);
  if (!proof) return ProofError::kBadProofSyntax;
  out.proof = *proof;
  return out;
}

ProofResult<ForwardHeader> verifyForwardHeader(std::string_view line, std::string_view secret,
                                               std::string_view ownMachineId, int64_t nowMs,
                                               const LinkedSenderCheck& isLinkedSender,
                                               NonceWindow& window) {
  assert(isLinkedSender);
  auto parsed = parseForwardHeader(line);
  if (!parsed) return parsed.error();
  const ForwardHeader& header = parsed->header;
  const SignedEnvelope& envelope = header.envelope;
  if (const auto error = checkEnvelope(envelope, ownMachineId, nowMs)) return *error;
  if (!isLinkedSender(envelope.sender)) return ProofError::kNotLinked;
  // The proof covers the fields as sent; parsing accepted one spelling per value, so rebuilding
  // them from the parsed values gives back the same bytes.
  const Proof expected =
      forwardProof(secret, envelope.sender, envelope.receiver, std::to_string(envelope.timeMs),
                   nonceToHex(envelope.nonce), header.tunnelId, orNone(header.route),
                   orNone(header.visitorAddress));
  if (!crypto::constantTimeEqual(expected, parsed->proof)) return ProofError::kBadProof;
  const auto admit = window.admit(envelope.nonce, envelope.timeMs, nowMs);
  if (admit != NonceWindow::Admit::kFresh) return admitError(admit);
  return std::move(parsed).value().header;
}

}  // namespace ot::mesh
