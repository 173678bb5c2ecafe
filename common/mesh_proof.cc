#include "common/mesh_proof.h"

#include <cstring>

#include "common/machine_identity.h"

namespace ot::mesh {
namespace {

bool isLowerHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

template <size_t N>
std::optional<std::array<uint8_t, N>> fixedFromHex(std::string_view text) {
  if (text.size() != 2 * N) return std::nullopt;
  for (const char c : text) {
    if (!isLowerHex(c)) return std::nullopt;
  }
  const auto bytes = crypto::fromHex(text);
  if (!bytes || bytes->size() != N) return std::nullopt;
  std::array<uint8_t, N> out{};
  std::memcpy(out.data(), bytes->data(), N);
  return out;
}

}  // namespace

std::optional<Nonce> randomNonce() {
  const auto bytes = crypto::randomBytes(kNonceSize);
  if (!bytes || bytes->size() != kNonceSize) return std::nullopt;
  Nonce nonce{};
  std::memcpy(nonce.data(), bytes->data(), kNonceSize);
  return nonce;
}

std::string nonceToHex(const Nonce& nonce) {
  return crypto::toHex(nonce);
}

std::optional<Nonce> nonceFromHex(std::string_view text) {
  return fixedFromHex<kNonceSize>(text);
}

std::string proofToHex(const Proof& proof) {
  return crypto::toHex(proof);
}

std::optional<Proof> proofFromHex(std::string_view text) {
  return fixedFromHex<crypto::kSha256Size>(text);
}

std::string_view proofErrorName(ProofError error) {
  switch (error) {
    case ProofError::kLineTooLong:
      return "line_too_long";
    case ProofError::kBadLine:
      return "bad_line";
    case ProofError::kWrongVersion:
      return "wrong_version";
    case ProofError::kBadMachineId:
      return "bad_machine_id";
    case ProofError::kOwnMachineId:
      return "own_machine_id";
    case ProofError::kBadNonce:
      return "bad_nonce";
    case ProofError::kBadProofSyntax:
      return "bad_proof_syntax";
    case ProofError::kBadProof:
      return "bad_proof";
    case ProofError::kBadTime:
      return "bad_time";
    case ProofError::kBadTunnel:
      return "bad_tunnel";
    case ProofError::kBadRoute:
      return "bad_route";
    case ProofError::kBadAddress:
      return "bad_address";
    case ProofError::kBadRequest:
      return "bad_request";
    case ProofError::kNotForUs:
      return "not_for_us";
    case ProofError::kStale:
      return "stale";
    case ProofError::kFuture:
      return "future";
    case ProofError::kNotLinked:
      return "not_linked";
    case ProofError::kReplayed:
      return "replayed";
    case ProofError::kReplayWindowFull:
      return "replay_window_full";
    case ProofError::kNoRandomness:
      return "no_randomness";
  }
  return "unknown";
}

LineScan scanLine(std::string_view buffer, size_t maxLine) {
  const size_t end = buffer.find('\n');
  if (end == std::string_view::npos) {
    return {buffer.size() >= maxLine ? LineStatus::kTooLong : LineStatus::kNeedMore, 0};
  }
  if (end + 1 > maxLine) return {LineStatus::kTooLong, 0};
  return {LineStatus::kComplete, end};
}

Proof meshMac(std::string_view secret, std::initializer_list<std::string_view> fields) {
  std::string input;
  size_t total = 0;
  for (const auto field : fields) total += 4 + field.size();
  input.reserve(total);
  for (const auto field : fields) {
    const auto length = static_cast<uint32_t>(field.size());
    input.push_back(static_cast<char>(length >> 24));
    input.push_back(static_cast<char>((length >> 16) & 0xFF));
    input.push_back(static_cast<char>((length >> 8) & 0xFF));
    input.push_back(static_cast<char>(length & 0xFF));
    input.append(field);
  }
  return crypto::hmacSha256(secret, input);
}

bool splitFieldsInto(std::string_view line, std::string_view* fields, size_t capacity) {
  size_t count = 0;
  size_t start = 0;
  for (size_t i = 0; i <= line.size(); ++i) {
    if (i < line.size() && line[i] != ' ') {
      const auto byte = static_cast<unsigned char>(line[i]);
      if (byte < 0x21 || byte > 0x7e) return false;
      continue;
    }
    if (i == start || count == capacity) return false;
    fields[count++] = line.substr(start, i - start);
    start = i + 1;
  }
  return count == capacity;
}

std::optional<int64_t> parseTimeMs(std::string_view text) {
  if (text.empty() || text.size() > 15) return std::nullopt;
  if (text.size() > 1 && text[0] == '0') return std::nullopt;
  int64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

ProofResult<SignedEnvelope> parseEnvelope(std::string_view sender, std::string_view receiver,
                                          std::string_view time, std::string_view nonce) {
  if (!validMachineName(sender) || !validMachineName(receiver)) return ProofError::kBadMachineId;
  const auto timeMs = parseTimeMs(time);
  if (!timeMs) return ProofError::kBadTime;
  const auto parsedNonce = nonceFromHex(nonce);
  if (!parsedNonce) return ProofError::kBadNonce;
  return SignedEnvelope{std::string(sender), std::string(receiver), *timeMs, *parsedNonce};
}

std::optional<ProofError> checkEnvelope(const SignedEnvelope& envelope,
                                        std::string_view ownMachineId, int64_t nowMs) {
  if (envelope.receiver != ownMachineId) return ProofError::kNotForUs;
  if (envelope.sender == ownMachineId) return ProofError::kOwnMachineId;
  if (envelope.timeMs < nowMs - kSignedHeaderValidityMs) return ProofError::kStale;
  if (envelope.timeMs > nowMs + kSignedHeaderValidityMs) return ProofError::kFuture;
  return std::nullopt;
}

ProofResult<SignedLine> parseSignedLine(std::string_view line, std::string_view version,
                                        std::string_view family) {
  const std::string_view first = line.substr(0, line.find(' '));
  if (first != version) {
    return first.starts_with(family) ? ProofError::kWrongVersion : ProofError::kBadLine;
  }
  SignedLine out;
  if (!splitFieldsInto(line, out.fields.data(), out.fields.size())) return ProofError::kBadLine;
  const auto& f = out.fields;
  auto envelope = parseEnvelope(f[1], f[2], f[3], f[4]);
  if (!envelope) return envelope.error();
  out.envelope = std::move(envelope).value();
  const auto proof = proofFromHex(f[5]);
  if (!proof) return ProofError::kBadProofSyntax;
  out.proof = *proof;
  return out;
}

std::string formatSignedLine(std::string_view version,
                             std::initializer_list<std::string_view> fields, const Proof& proof) {
  std::string line(version);
  for (const std::string_view field : fields) {
    line += ' ';
    line += field;
  }
  line += ' ';
  line += proofToHex(proof);
  return line;
}

}  // namespace ot::mesh
