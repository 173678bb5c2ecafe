#include "common/alive_probe.h"

#include "common/machine_identity.h"

namespace ot::mesh {
namespace {

constexpr std::string_view kAskRole = "ask";
constexpr std::string_view kAnswerRole = "answer";
constexpr std::string_view kAliveFamily = "OPENTUNNEL-ALIVE";

std::optional<ProofError> versionError(std::string_view line) {
  const std::string_view first = line.substr(0, line.find(' '));
  if (first == kAliveVersion) return std::nullopt;
  return first.starts_with(kAliveFamily) ? ProofError::kWrongVersion : ProofError::kBadLine;
}

Proof answerProof(std::string_view secret, const SignedEnvelope& question, std::string_view time,
                  std::string_view state) {
  const std::string nonce = nonceToHex(question.nonce);
  return meshMac(
      secret, {kAliveLabel, kAnswerRole, question.receiver, question.sender, time, nonce, state});
}

}  // namespace

std::string_view aliveStateName(AliveState state) {
  switch (state) {
    case AliveState::kServing:
      return "serving";
    case AliveState::kControlDown:
      return "control_down";
    case AliveState::kDraining:
      return "draining";
  }
  return "serving";
}

std::optional<AliveState> aliveStateFromName(std::string_view name) {
  for (const AliveState state :
       {AliveState::kServing, AliveState::kControlDown, AliveState::kDraining}) {
    if (aliveStateName(state) == name) return state;
  }
  return std::nullopt;
}

std::optional<std::string> buildAliveQuestion(std::string_view secret,
                                              const SignedEnvelope& question) {
  if (!validMachineName(question.sender) || !validMachineName(question.receiver) ||
      !parseTimeMs(std::to_string(question.timeMs))) {
    return std::nullopt;
  }
  const std::string time = std::to_string(question.timeMs);
  const std::string nonce = nonceToHex(question.nonce);
  const Proof proof =
      meshMac(secret, {kAliveLabel, kAskRole, question.sender, question.receiver, time, nonce});
  std::string line =
      formatSignedLine(kAliveVersion, {question.sender, question.receiver, time, nonce}, proof);
  line += '\n';
  return line;
}

ProofResult<SignedEnvelope> verifyAliveQuestion(std::string_view line, std::string_view secret,
                                                std::string_view ownMachineId, int64_t nowMs) {
  auto parsed = parseSignedLine(line, kAliveVersion, kAliveFamily);
  if (!parsed) return parsed.error();
  if (const auto error = checkEnvelope(parsed->envelope, ownMachineId, nowMs)) return *error;
  const auto& f = parsed->fields;
  const Proof expected = meshMac(secret, {kAliveLabel, kAskRole, f[1], f[2], f[3], f[4]});
  if (!crypto::constantTimeEqual(expected, parsed->proof)) return ProofError::kBadProof;
  return std::move(parsed->envelope);
}

std::string buildAliveAnswer(std::string_view secret, const SignedEnvelope& question,
                             AliveState state, int64_t timeMs) {
  const std::string time = std::to_string(timeMs);
  const std::string_view stateName = aliveStateName(state);
  std::string line =
      formatSignedLine(kAliveVersion, {question.receiver, question.sender, time, stateName},
                       answerProof(secret, question, time, stateName));
  line += '\n';
  return line;
}

ProofResult<AliveState> verifyAliveAnswer(std::string_view line, std::string_view secret,
                                          const SignedEnvelope& question, int64_t nowMs) {
  if (const auto error = versionError(line)) return *error;
  const auto fields = splitFields<6>(line);
  if (!fields) return ProofError::kBadLine;
  const auto& f = *fields;
  if (!validMachineName(f[1]) || !validMachineName(f[2])) return ProofError::kBadMachineId;
  // The answer must come from the machine asked, to the asker.
  if (f[1] != question.receiver || f[2] != question.sender) return ProofError::kNotForUs;
  const auto timeMs = parseTimeMs(f[3]);
  if (!timeMs) return ProofError::kBadTime;
  const auto state = aliveStateFromName(f[4]);
  if (!state) return ProofError::kBadLine;
  const auto proof = proofFromHex(f[5]);
  if (!proof) return ProofError::kBadProofSyntax;
  if (*timeMs + kSignedHeaderValidityMs < nowMs) return ProofError::kStale;
  if (*timeMs > nowMs + kSignedHeaderValidityMs) return ProofError::kFuture;
  if (!crypto::constantTimeEqual(answerProof(secret, question, f[3], f[4]), *proof)) {
    return ProofError::kBadProof;
  }
  return *state;
}

}  // namespace ot::mesh
