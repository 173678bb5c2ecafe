// Fuzzes the signed headers a peer sends before it is trusted: the forward header line
// (parseForwardHeader) and the x-opentunnel-auth value (parseRouteCheckAuth). Whatever parses
// must have one spelling: rebuilt from its values (with another secret), the line is the same
// up to the proof, reads back to the same values, verifies once and is then a replay.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/forward_header.h"
#include "common/mesh_proof.h"
#include "common/nonce_window.h"
#include "common/route_check_auth.h"

namespace {

using namespace ot::mesh;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

std::string_view withoutProof(std::string_view line) {
  return line.substr(0, line.rfind(' '));
}

const LinkedSenderCheck kAnyone = [](std::string_view) { return true; };

void fuzzForward(std::string_view line) {
  const auto parsed = parseForwardHeader(line);
  if (!parsed) return;
  const ForwardHeader& header = parsed->header;
  const auto rebuilt = buildForwardHeader("fuzz-secret", header);
  check(rebuilt.has_value());
  check(rebuilt->back() == '\n');
  const std::string_view again(rebuilt->data(), rebuilt->size() - 1);
  check(withoutProof(again) == withoutProof(line));
  const auto reparsed = parseForwardHeader(again);
  check(reparsed.ok() && reparsed->header == header);

  NonceWindow window;
  const SignedEnvelope& e = header.envelope;
  const auto verified =
      verifyForwardHeader(again, "fuzz-secret", e.receiver, e.timeMs, kAnyone, window);
  if (e.sender == e.receiver) {
    check(!verified && verified.error() == ProofError::kOwnMachineId);
    return;
  }
  check(verified.ok() && *verified == header);
  const auto replay =
      verifyForwardHeader(again, "fuzz-secret", e.receiver, e.timeMs, kAnyone, window);
  check(!replay && replay.error() == ProofError::kReplayed);
  // The original line's proof was made with some other secret (or none): it never verifies here
  // unless it is exactly the proof this secret gives.
  NonceWindow fresh;
  const auto original =
      verifyForwardHeader(line, "fuzz-secret", e.receiver, e.timeMs, kAnyone, fresh);
  check(original.ok() == (line == again));
}

void fuzzRouteCheck(std::string_view value) {
  const auto parsed = parseRouteCheckAuth(value);
  if (!parsed) return;
  const auto rebuilt = buildRouteCheckAuth("fuzz-secret", parsed->envelope, "GET", "/x");
  check(rebuilt.has_value());
  check(withoutProof(*rebuilt) == withoutProof(value));
  const auto reparsed = parseRouteCheckAuth(*rebuilt);
  check(reparsed.ok() && reparsed->envelope == parsed->envelope);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const LineScan scan = scanLine(input);
  if (scan.status == LineStatus::kComplete) {
    check(scan.length < kMaxHeaderLine && input[scan.length] == '\n');
    fuzzForward(input.substr(0, scan.length));
    fuzzRouteCheck(input.substr(0, scan.length));
  } else if (scan.status == LineStatus::kTooLong) {
    check(input.substr(0, kMaxHeaderLine).find('\n') == std::string_view::npos);
  } else {
    check(size < kMaxHeaderLine && input.find('\n') == std::string_view::npos);
  }
  fuzzRouteCheck(input);
  return 0;
}
