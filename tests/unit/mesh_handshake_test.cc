#include "common/mesh_handshake.h"

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <string_view>

#include "common/crypto.h"
#include "common/mesh_proof.h"

namespace ot::mesh {
namespace {

const std::string kSecret = "s3cret-internal-token-0123456789abcdef";

Nonce nonceOf(uint8_t fill) {
  Nonce nonce{};
  nonce.fill(fill);
  return nonce;
}

// Feeds one byte at a time, collecting what the machine wants sent.
HandshakeStep feedBytewise(auto& machine, std::string_view bytes) {
  HandshakeStep last;
  std::string sent;
  for (const char c : bytes) {
    last = machine.feed(std::string_view(&c, 1));
    sent += last.send;
    if (last.state != HandshakeState::kNeedMore) break;
  }
  last.send = sent;
  return last;
}

TEST_CASE("mesh handshake: both sides prove the secret, bytes arriving one at a time") {
  MeshDialer dialer(kSecret, "machine-a", nonceOf(0x11));
  MeshAcceptor acceptor(kSecret, "machine-b", nonceOf(0x22));

  const std::string opening = dialer.openingLine();
  CHECK(opening == "OPENTUNNEL-MESH/2 machine-a " + std::string(32, '1') + "\n");
  const HandshakeStep answer = feedBytewise(acceptor, opening);
  CHECK(answer.state == HandshakeState::kNeedMore);
  CHECK(answer.send.starts_with("OPENTUNNEL-MESH/2 machine-b " + std::string(32, '2') + " "));
  CHECK(answer.send.size() == 17 + 1 + 9 + 1 + 32 + 1 + 64 + 1);

  const HandshakeStep proof = feedBytewise(dialer, answer.send);
  REQUIRE(proof.state == HandshakeState::kProven);
  CHECK(dialer.peerMachineId() == "machine-b");
  CHECK(proof.send.size() == 65);

  // The dialer may send its first frame right behind its proof: it comes back as leftover.
  const HandshakeStep done = feedBytewise(acceptor, proof.send + "HELLO");
  REQUIRE(done.state == HandshakeState::kProven);
  CHECK(acceptor.peerMachineId() == "machine-a");
  CHECK(acceptor.takeLeftover().empty());  // bytewise: stopped at the proof's newline
}

TEST_CASE("mesh handshake: everything in one piece, frames behind the proof kept as leftover") {
  MeshDialer dialer(kSecret, "a", nonceOf(1));
  MeshAcceptor acceptor(kSecret, "b", nonceOf(2));
  const HandshakeStep answer = acceptor.feed(dialer.openingLine());
  const HandshakeStep proof = dialer.feed(answer.send);
  REQUIRE(proof.state == HandshakeState::kProven);
  const HandshakeStep done = acceptor.feed(proof.send + std::string("\0\0\0\x05hello", 9));
  REQUIRE(done.state == HandshakeState::kProven);
  CHECK(done.send.empty());
  CHECK(acceptor.takeLeftover() == std::string("\0\0\0\x05hello", 9));
  // A finished machine changes nothing more.
  CHECK(acceptor.feed("garbage\n").state == HandshakeState::kProven);
  CHECK(acceptor.peerMachineId() == "a");
}

TEST_CASE("mesh handshake: a peer without the secret is refused on either side") {
  SUBCASE("acceptor without it: the dialer refuses its proof and sends nothing") {
    MeshDialer dialer(kSecret, "a", nonceOf(1));
    MeshAcceptor impostor("wrong", "b", nonceOf(2));
    const HandshakeStep step = dialer.feed(impostor.feed(dialer.openingLine()).send);
    CHECK(step.state == HandshakeState::kRefused);
    CHECK(step.send.empty());
    CHECK(dialer.error() == ProofError::kBadProof);
    CHECK(dialer.peerMachineId().empty());
  }
  SUBCASE("dialer without it: the acceptor refuses its proof") {
    MeshDialer impostor("wrong", "a", nonceOf(1));
    MeshAcceptor acceptor(kSecret, "b", nonceOf(2));
    const HandshakeStep answer = acceptor.feed(impostor.openingLine());
    // The impostor cannot check the acceptor's proof; say it sends the proof it would make.
    const std::string forged =
        proofToHex(handshakeProof("wrong", kRoleDial, "a", "b", nonceOf(1), nonceOf(2))) + "\n";
    CHECK(answer.state == HandshakeState::kNeedMore);
    CHECK(acceptor.feed(forged).state == HandshakeState::kRefused);
    CHECK(acceptor.error() == ProofError::kBadProof);
  }
}

TEST_CASE("mesh handshake: the secret is never sent and what a peer learns cannot be reused") {
  MeshDialer dialer(kSecret, "a", nonceOf(1));
  MeshAcceptor acceptor(kSecret, "b", nonceOf(2));
  const std::string opening = dialer.openingLine();
  const HandshakeStep answer = acceptor.feed(opening);
  const HandshakeStep proof = dialer.feed(answer.send);
  const std::string transcript = opening + answer.send + proof.send;
  CHECK(transcript.find(kSecret) == std::string::npos);
  CHECK(transcript.find(crypto::toHex(crypto::asBytes(kSecret))) == std::string::npos);

  const std::string acceptorProof = answer.send.substr(answer.send.rfind(' ') + 1);

  SUBCASE("the acceptor's proof replayed to a dialer with another nonce fails") {
    MeshDialer second(kSecret, "a", nonceOf(3));
    (void)second.openingLine();
    const std::string replay =
        "OPENTUNNEL-MESH/2 b " + nonceToHex(nonceOf(2)) + " " + acceptorProof;
    CHECK(second.feed(replay).state == HandshakeState::kRefused);
    CHECK(second.error() == ProofError::kBadProof);
  }
  SUBCASE("the dialer's proof replayed to an acceptor with another nonce fails") {
    MeshAcceptor second(kSecret, "b", nonceOf(4));
    CHECK(second.feed(opening).state == HandshakeState::kNeedMore);
    CHECK(second.feed(proof.send).state == HandshakeState::kRefused);
    CHECK(second.error() == ProofError::kBadProof);
  }
  SUBCASE("the acceptor's proof reflected back as the dialer's fails (roles are signed)") {
    MeshAcceptor second(kSecret, "b", nonceOf(2));
    CHECK(second.feed(opening).state == HandshakeState::kNeedMore);
    CHECK(second.feed(acceptorProof).state == HandshakeState::kRefused);
    CHECK(second.error() == ProofError::kBadProof);
  }
  SUBCASE("a proof for one pair of machines does not serve another") {
    MeshDialer other(kSecret, "c", nonceOf(1));
    (void)other.openingLine();
    CHECK(other.feed(answer.send).state == HandshakeState::kRefused);
    CHECK(other.error() == ProofError::kBadProof);
  }
}

TEST_CASE("mesh handshake: the proof is HMAC-SHA256 over length-prefixed fields") {
  auto field = [](std::string_view text) {
    std::string out;
    out.push_back(0);
    out.push_back(0);
    out.push_back(static_cast<char>(text.size() >> 8));
    out.push_back(static_cast<char>(text.size() & 0xFF));
    return out + std::string(text);
  };
  const std::string input = field("OPENTUNNEL-MESH/2") + field("accept") + field("a") + field("b") +
                            field(std::string(32, '1')) + field(std::string(32, '2'));
  CHECK(handshakeProof(kSecret, kRoleAccept, "a", "b", nonceOf(0x11), nonceOf(0x22)) ==
        crypto::hmacSha256(kSecret, input));
  // Moving a byte from one field to the next changes the input.
  CHECK(meshMac(kSecret, {"ab", "c"}) != meshMac(kSecret, {"a", "bc"}));
  CHECK(meshMac(kSecret, {"a", ""}) != meshMac(kSecret, {"a"}));
}

TEST_CASE("mesh handshake: malformed first lines are refused with their reason") {
  struct Case {
    std::string line;
    ProofError error;
  };
  const std::string n = std::string(32, 'a');
  const Case cases[] = {
      {"OPENTUNNEL-MESH/1 the-token\n", ProofError::kWrongVersion},
      {"OPENTUNNEL-MESH the-token\n", ProofError::kWrongVersion},
      {"OPENTUNNEL-MESH/3 a " + n + "\n", ProofError::kWrongVersion},
      {"GET /internal/tunnel/x/routes HTTP/1.1\n", ProofError::kBadLine},
      {"OPENTUNNEL-MESH/2 a\n", ProofError::kBadLine},
      {"OPENTUNNEL-MESH/2 a " + n + " extra\n", ProofError::kBadLine},
      {"OPENTUNNEL-MESH/2  a " + n + "\n", ProofError::kBadLine},
      {"OPENTUNNEL-MESH/2 a " + n + "\r\n", ProofError::kBadLine},
      {"OPENTUNNEL-MESH/2 a/b " + n + "\n", ProofError::kBadMachineId},
      {"OPENTUNNEL-MESH/2 " + std::string(65, 'm') + " " + n + "\n", ProofError::kBadMachineId},
      {"OPENTUNNEL-MESH/2 a " + std::string(32, 'A') + "\n", ProofError::kBadNonce},
      {"OPENTUNNEL-MESH/2 a " + std::string(30, 'a') + "\n", ProofError::kBadNonce},
      {"OPENTUNNEL-MESH/2 me " + n + "\n", ProofError::kOwnMachineId},
  };
  for (const auto& c : cases) {
    CAPTURE(c.line);
    MeshAcceptor acceptor(kSecret, "me", nonceOf(2));
    const HandshakeStep step = acceptor.feed(c.line);
    CHECK(step.state == HandshakeState::kRefused);
    CHECK(step.send.empty());
    CHECK(acceptor.error() == c.error);
  }
}

TEST_CASE("mesh handshake: an acceptor naming the dialer's own ID is refused") {
  MeshDialer dialer(kSecret, "a", nonceOf(1));
  MeshAcceptor mirror(kSecret, "a-twin", nonceOf(2));
  std::string answer = mirror.feed(dialer.openingLine()).send;
  answer.replace(answer.find("a-twin"), 6, "a");
  CHECK(dialer.feed(answer).state == HandshakeState::kRefused);
  CHECK(dialer.error() == ProofError::kOwnMachineId);
}

TEST_CASE("mesh handshake: a header line is at most 1 KiB, newline included") {
  SUBCASE("1024 bytes without a newline: refused before the newline arrives") {
    MeshAcceptor acceptor(kSecret, "me", nonceOf(2));
    CHECK(acceptor.feed(std::string(1023, 'x')).state == HandshakeState::kNeedMore);
    CHECK(acceptor.feed("x").state == HandshakeState::kRefused);
    CHECK(acceptor.error() == ProofError::kLineTooLong);
  }
  SUBCASE("1023 bytes and the newline: read (and refused for what it says)") {
    MeshAcceptor acceptor(kSecret, "me", nonceOf(2));
    CHECK(acceptor.feed(std::string(1023, 'x') + "\n").state == HandshakeState::kRefused);
    CHECK(acceptor.error() == ProofError::kBadLine);
  }
  SUBCASE("the dialer's proof line too") {
    MeshDialer dialer(kSecret, "a", nonceOf(1));
    MeshAcceptor acceptor(kSecret, "b", nonceOf(2));
    CHECK(acceptor.feed(dialer.openingLine()).state == HandshakeState::kNeedMore);
    CHECK(acceptor.feed(std::string(2000, 'f')).state == HandshakeState::kRefused);
    CHECK(acceptor.error() == ProofError::kLineTooLong);
  }
  SUBCASE("the acceptor's answer") {
    MeshDialer dialer(kSecret, "a", nonceOf(1));
    CHECK(dialer.feed(std::string(1024, 'y')).state == HandshakeState::kRefused);
    CHECK(dialer.error() == ProofError::kLineTooLong);
  }
}

TEST_CASE("mesh handshake: a dialer's proof line that is not 64 lowercase hex digits") {
  MeshDialer dialer(kSecret, "a", nonceOf(1));
  MeshAcceptor strict(kSecret, "b", nonceOf(2));
  (void)strict.feed(dialer.openingLine());
  CHECK(strict.feed(std::string(64, 'F') + "\n").state == HandshakeState::kRefused);
  CHECK(strict.error() == ProofError::kBadProofSyntax);
}

TEST_CASE("mesh handshake: random nonces differ and the constants are the spec's") {
  std::set<std::string> seen;
  for (int i = 0; i < 64; ++i) {
    const auto nonce = randomNonce();
    REQUIRE(nonce);
    seen.insert(nonceToHex(*nonce));
  }
  CHECK(seen.size() == 64);
  CHECK(kMaxHeaderLine == 1024);
  CHECK(kPreAuthTimeoutMs == 10'000);
  CHECK(kMaxPreAuthConnections == 256);
}

}  // namespace
}  // namespace ot::mesh
