// Fuzzes both ends of the mesh link's handshake with what a peer may send before it has proven the
// secret. Fed whole and in pieces (sizes derived from the input, so a replayed seed always splits
// the same way), each machine must end in the same state with the same reason and have asked to
// send the same bytes (unless refused); an acceptor's answer must be one a dialer holding the
// secret accepts.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/mesh_handshake.h"

namespace {

using namespace ot::mesh;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

constexpr std::string_view kSecret = "fuzz-secret";

Nonce nonceOf(uint8_t fill) {
  Nonce nonce{};
  nonce.fill(fill);
  return nonce;
}

struct Outcome {
  HandshakeState state = HandshakeState::kNeedMore;
  ProofError error = ProofError::kBadLine;
  std::string sent;
  std::string peer;
};

template <typename Machine>
Outcome run(Machine& machine, std::string_view input, bool inPieces) {
  Outcome out;
  uint32_t state = static_cast<uint32_t>(input.size()) * 2654435761U;
  for (const char c : input) state = (state ^ static_cast<uint8_t>(c)) * 16777619U;
  size_t at = 0;
  do {
    size_t piece = input.size() - at;
    if (inPieces) {
      state = state * 1103515245U + 12345U;
      piece = std::min<size_t>((state >> 16) % 40, piece);
    }
    const HandshakeStep step = machine.feed(input.substr(at, piece));
    at += piece;
    out.sent += step.send;
    out.state = step.state;
    if (step.state == HandshakeState::kRefused) check(step.send.empty());
  } while (at < input.size() && out.state == HandshakeState::kNeedMore);
  check(out.state == machine.state());
  if (out.state == HandshakeState::kRefused) out.error = machine.error();
  out.peer = machine.peerMachineId();
  return out;
}

// What was asked to be sent before a refusal depends on how the bytes were split (a refusal drops
// the answer of the same feed: the connection closes anyway), so it is compared only otherwise.
bool same(const Outcome& a, const Outcome& b) {
  const bool refused = a.state == HandshakeState::kRefused;
  return a.state == b.state && a.error == b.error && (refused || a.sent == b.sent) &&
         a.peer == b.peer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  MeshAcceptor wholeAcceptor(std::string(kSecret), "acceptor", nonceOf(2));
  MeshAcceptor splitAcceptor(std::string(kSecret), "acceptor", nonceOf(2));
  const Outcome acceptorWhole = run(wholeAcceptor, input, false);
  check(same(acceptorWhole, run(splitAcceptor, input, true)));
  if (acceptorWhole.state == HandshakeState::kNeedMore && !acceptorWhole.sent.empty()) {
    // Answered a well-formed opening line: a dialer with the secret and that line accepts it.
    check(acceptorWhole.sent.back() == '\n');
    const std::string_view opening = input.substr(0, input.find('\n'));
    const std::string peer(opening.substr(18, opening.rfind(' ') - 18));
    const auto nonce = nonceFromHex(opening.substr(opening.rfind(' ') + 1));
    check(nonce.has_value());
    MeshDialer dialer(std::string(kSecret), peer, *nonce);
    check(dialer.openingLine() == std::string(opening) + "\n");
    check(dialer.feed(acceptorWhole.sent).state == HandshakeState::kProven);
  }
  // A proven acceptor needs the dialer's proof: an input that only guesses it never gets there.
  check(acceptorWhole.state != HandshakeState::kProven);

  MeshDialer wholeDialer(std::string(kSecret), "dialer", nonceOf(1));
  MeshDialer splitDialer(std::string(kSecret), "dialer", nonceOf(1));
  const Outcome dialerWhole = run(wholeDialer, input, false);
  check(same(dialerWhole, run(splitDialer, input, true)));
  check(dialerWhole.state != HandshakeState::kProven);
  check(dialerWhole.sent.empty());
  return 0;
}
