// The liveness question a machine asks a peer's relayd when its mesh link to that peer ends or
// goes silent (docs/mesh.md "A controld restart drops no tunnel"): is your data plane still up,
// holding its bridges? The answer decides whether the peer's table entries are kept (its control
// plane is restarting) or dropped (the machine is gone).
//
//   question:  OPENTUNNEL-ALIVE/2 <asker> <asked> <time> <nonce> <proof>\n
//   answer:    OPENTUNNEL-ALIVE/2 <asked> <asker> <time> <state> <proof>\n
//
// The question's proof is meshMac(secret, {"OPENTUNNEL-ALIVE/2", "ask", asker, asked, time,
// nonce}); the answer's is meshMac(secret, {"OPENTUNNEL-ALIVE/2", "answer", asked, asker, time,
// the question's nonce, state}), so an answer is bound to the one question it answers: it cannot
// be replayed to another asker or to a later question, nor made without the secret. The question
// needs no replay window: replaying it only earns the replayer an answer bound to a nonce it did
// not choose, which no asker accepts.
//
// Pure. relayd answers questions on its internal listener; controld's mesh node asks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/mesh_proof.h"

namespace ot::mesh {

inline constexpr std::string_view kAliveVersion = "OPENTUNNEL-ALIVE/2";
inline constexpr std::string_view kAliveLabel = "OPENTUNNEL-ALIVE/2";

// What the asked relayd says of itself.
enum class AliveState : uint8_t {
  kServing,      // its control session is up
  kControlDown,  // serving its bridges from its cache while its controld is away
  kDraining,     // leaving: its bridges are being moved away
};

[[nodiscard]] std::string_view aliveStateName(AliveState state);  // serving, control_down, draining
[[nodiscard]] std::optional<AliveState> aliveStateFromName(std::string_view name);

// The question's line, newline included; nullopt when a machine ID or the time is not
// well-formed.
[[nodiscard]] std::optional<std::string> buildAliveQuestion(std::string_view secret,
                                                            const SignedEnvelope& question);

// The asked side's checks, in order: syntax; addressed to ownMachineId and not from it; within
// kSignedHeaderValidityMs of nowMs; the proof (constant time).
[[nodiscard]] ProofResult<SignedEnvelope> verifyAliveQuestion(std::string_view line,
                                                              std::string_view secret,
                                                              std::string_view ownMachineId,
                                                              int64_t nowMs);

// The answer to a verified question, newline included (timeMs: the answerer's clock).
[[nodiscard]] std::string buildAliveAnswer(std::string_view secret, const SignedEnvelope& question,
                                           AliveState state, int64_t timeMs);

// The asker's checks of an answer line (without its newline) to `question` (the one it sent):
// syntax; from the asked machine, to the asker; within kSignedHeaderValidityMs of nowMs; the proof
// over the question's nonce (constant time).
[[nodiscard]] ProofResult<AliveState> verifyAliveAnswer(std::string_view line,
                                                        std::string_view secret,
                                                        const SignedEnvelope& question,
                                                        int64_t nowMs);

}  // namespace ot::mesh
