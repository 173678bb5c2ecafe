#include "common/forward_header.h"

#include <array>
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
  if (!header.origin.empty() && !validMachineName(header.origin)) return ProofError::kBadLine;
  return std::nullopt;
}

Proof forwardProof(std::string_view secret, std::string_view sender, std::string_view receiver,
                   std::string_view time, std::string_view nonce, std::string_view tunnel,
                   std::string_view route, std::string_view visitor, std::string_view origin) {
  // Without an origin the proof is exactly the one older relays make and check.
  if (origin.empty()) {
    return meshMac(secret, {kForwardLabel, sender, receiver, time, nonce, tunnel, route, visitor});
  }
  return meshMac(secret,
                 {kForwardLabel, sender, receiver, time, nonce, tunnel, route, visitor, origin});
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
                                   header.tunnelId, route, visitor, header.origin);
  std::string line = header.origin.empty()
                         ? formatSignedLine(kForwardVersion,
                                            {envelope.sender, envelope.receiver, time, nonce,
                                             header.tunnelId, route, visitor},
                                            proof)
                         : formatSignedLine(kForwardVersion,
                                            {envelope.sender, envelope.receiver, time, nonce,
                                             header.tunnelId, route, visitor, header.origin},
                                            proof);
  line += '\n';
  return line;
}

ProofResult<SignedForward> parseForwardHeader(std::string_view line) {
  const std::string_view first = line.substr(0, line.find(' '));
  if (first != kForwardVersion) {
    return first.starts_with("OPENTUNNEL-FORWARD") ? ProofError::kWrongVersion
                                                   : ProofError::kBadLine;
  }
  // 9 fields, or 10 with the chosen origin before the proof (docs/mesh.md "The forward header").
  std::array<std::string_view, 10> f;
  size_t count = 9;
  if (!splitFieldsInto(line, f.data(), 9)) {
    if (!splitFieldsInto(line, f.data(), 10)) return ProofError::kBadLine;
    count = 10;
  }
  auto envelope = parseEnvelope(f[1], f[2], f[3], f[4]);
  if (!envelope) return envelope.error();
  SignedForward out;
  out.header.envelope = std::move(envelope).value();
  out.header.tunnelId = std::string(f[5]);
  // "-" is the only spelling of an empty route or address: an empty field cannot be split out,
  // and "-" is neither a DNS label nor an address, so each value has one spelling.
  out.header.route = std::string(fromNone(f[6]));
  out.header.visitorAddress = std::string(fromNone(f[7]));
  if (count == 10) {
    out.header.origin = std::string(f[8]);
    if (out.header.origin.empty()) return ProofError::kBadLine;
  }
  if (const auto error = checkPayload(out.header)) return *error;
  const auto proof = proofFromHex(f[count - 1]);
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
                   orNone(header.visitorAddress), header.origin);
  if (!crypto::constantTimeEqual(expected, parsed->proof)) return ProofError::kBadProof;
  const auto admit = window.admit(envelope.nonce, envelope.timeMs, nowMs);
  if (admit != NonceWindow::Admit::kFresh) return admitError(admit);
  return std::move(parsed).value().header;
}

}  // namespace ot::mesh
