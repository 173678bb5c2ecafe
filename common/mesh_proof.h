// What every proof of INTERNAL_TOKEN between machines shares (docs/mesh.md "Proofs and signed
// headers"): the limits before a peer has proven the secret, the nonce, the MAC construction, the
// one reason enum all refusals use, the header-line scan, and the freshness rule of signed
// headers. Pure: no I/O, no shared state; callable from any thread.
//
// Users: common/mesh_handshake.* (controld's mesh links), common/forward_header.* (relayd's
// forwarded visitors), common/route_check_auth.* (controld's route checks).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "common/crypto.h"
#include "common/result.h"

namespace ot::mesh {

// Before a peer has proven the secret: its header line may be at most this long (the newline
// included), and must arrive within kPreAuthTimeoutMs; at most kMaxPreAuthConnections such
// connections are held at once. The timer and the count are the caller's (the listener).
inline constexpr size_t kMaxHeaderLine = 1024;
inline constexpr int64_t kPreAuthTimeoutMs = 10'000;
inline constexpr size_t kMaxPreAuthConnections = 256;

// A signed header (forward, route check) counts when its time is within this many milliseconds of
// the receiver's clock, either way (the bounds included).
inline constexpr int64_t kSignedHeaderValidityMs = 30'000;

// Nonces are 16 random bytes, written as 32 lowercase hex digits.
inline constexpr size_t kNonceSize = 16;
using Nonce = std::array<uint8_t, kNonceSize>;
using Proof = crypto::Sha256Digest;

// A fresh nonce from OpenSSL's CSPRNG; nullopt when randomness is unavailable (the caller fails the
// handshake or forward, never falls back).
[[nodiscard]] std::optional<Nonce> randomNonce();
[[nodiscard]] std::string nonceToHex(const Nonce& nonce);
// Exactly 32 lowercase hex digits, else nullopt.
[[nodiscard]] std::optional<Nonce> nonceFromHex(std::string_view text);
[[nodiscard]] std::string proofToHex(const Proof& proof);
// Exactly 64 lowercase hex digits, else nullopt.
[[nodiscard]] std::optional<Proof> proofFromHex(std::string_view text);

// Every reason a handshake, a forward header or a route-check signature is refused. The names
// (proofErrorName) are meant for log lines and a metric label.
enum class ProofError : uint8_t {
  kLineTooLong,       // no newline within kMaxHeaderLine bytes
  kBadLine,           // not the expected number of space-separated fields, or a stray byte
  kWrongVersion,      // another OPENTUNNEL-MESH / -FORWARD / -AUTH version (the old ones included)
  kBadMachineId,      // a machine ID that is not validMachineName
  kOwnMachineId,      // the peer (or sender) names this machine's own ID
  kBadNonce,          // not 32 lowercase hex digits
  kBadProofSyntax,    // not 64 lowercase hex digits
  kBadProof,          // the MAC does not check out: the peer does not hold the secret
  kBadTime,           // not a decimal count of Unix milliseconds
  kBadTunnel,         // not a tunnel ID (one DNS label)
  kBadRoute,          // not "-" (the bare hostname) or one DNS label
  kBadAddress,        // not "-" (unknown) or ip:port ([v6]:port)
  kBadRequest,        // route check: the method or path cannot be signed
  kNotForUs,          // addressed to another machine
  kStale,             // signed more than kSignedHeaderValidityMs ago (or older than the replay
                      // window remembers)
  kFuture,            // signed more than kSignedHeaderValidityMs ahead of this clock
  kNotLinked,         // the sender is not linked now at the address the request comes from
  kReplayed,          // the nonce was seen already
  kReplayWindowFull,  // the replay window is at its cap: refused rather than risk a replay
  kNoRandomness,      // this side could not make a nonce
};
[[nodiscard]] std::string_view proofErrorName(ProofError error);

template <typename T>
using ProofResult = Result<T, ProofError>;

// Where the first line of `buffer` ends. kComplete: `length` bytes of line, then '\n' (so the
// caller consumes length + 1). kTooLong: no '\n' within maxLine bytes (the newline counts).
enum class LineStatus : uint8_t { kNeedMore, kComplete, kTooLong };
struct LineScan {
  LineStatus status = LineStatus::kNeedMore;
  size_t length = 0;
};
[[nodiscard]] LineScan scanLine(std::string_view buffer, size_t maxLine = kMaxHeaderLine);

// HMAC-SHA256 keyed with the secret over `fields`, each preceded by its length as a 4-byte
// big-endian integer, so no two field lists give the same input. The first field is always a
// label naming the proof's purpose (kHandshake*Label, kForwardLabel, kRouteCheckLabel).
[[nodiscard]] Proof meshMac(std::string_view secret,
                            std::initializer_list<std::string_view> fields);

// Splits a line on single spaces into exactly N fields; nullopt for another count, an empty field
// (two spaces, a leading or trailing one) or any byte outside 0x21..0x7e.
// (The count check is splitFieldsInto's: it fills at most `capacity` fields and answers false when
// the line has another count or a bad byte.)
[[nodiscard]] bool splitFieldsInto(std::string_view line, std::string_view* fields,
                                   size_t capacity);
template <size_t N>
[[nodiscard]] std::optional<std::array<std::string_view, N>> splitFields(std::string_view line) {
  std::array<std::string_view, N> fields;
  if (!splitFieldsInto(line, fields.data(), N)) return std::nullopt;
  return fields;
}

// Unix milliseconds as sent: decimal digits, no sign, no leading zero (so one spelling per value),
// at most 15 digits.
[[nodiscard]] std::optional<int64_t> parseTimeMs(std::string_view text);

// The sender, receiver, time and nonce every signed header carries, and the checks on them that
// need no secret: both machine IDs well-formed, the receiver is `ownMachineId`, the sender is not,
// the time within kSignedHeaderValidityMs of nowMs.
struct SignedEnvelope {
  std::string sender;
  std::string receiver;
  int64_t timeMs = 0;
  Nonce nonce{};
  bool operator==(const SignedEnvelope&) const = default;
};
[[nodiscard]] ProofResult<SignedEnvelope> parseEnvelope(std::string_view sender,
                                                        std::string_view receiver,
                                                        std::string_view time,
                                                        std::string_view nonce);
[[nodiscard]] std::optional<ProofError> checkEnvelope(const SignedEnvelope& envelope,
                                                      std::string_view ownMachineId, int64_t nowMs);

// A signed line of exactly six fields, `<version> <sender> <receiver> <time> <nonce> <proof>` (a
// route check's x-opentunnel-auth value, a liveness question): syntax only, no clock, no secret.
// Another version of the same `family` ("OPENTUNNEL-AUTH") is kWrongVersion, anything else
// kBadLine. `fields` are views into `line`, as sent (what the proof covers).
// "<version> <field> ... <proof>" as every signed line is written (fields as given, the proof in
// hex), without a newline: the route check's header value, and with one appended the forward
// header and the liveness lines.
[[nodiscard]] std::string formatSignedLine(std::string_view version,
                                           std::initializer_list<std::string_view> fields,
                                           const Proof& proof);

struct SignedLine {
  SignedEnvelope envelope;
  Proof proof{};
  std::array<std::string_view, 6> fields;
};
[[nodiscard]] ProofResult<SignedLine> parseSignedLine(std::string_view line,
                                                      std::string_view version,
                                                      std::string_view family);

}  // namespace ot::mesh
