#include "common/tls_engine.h"

#include <doctest/doctest.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/unit/test_certs.h"

using ot::tls::TlsEngine;
using ot::tls::TlsStatus;

namespace {

// One PKI per test binary run: CA + leaves, and the CA PEMs written to temp files (the client
// context takes a path). The files are removed at exit.
struct EnginePki {
  ot::test::TestCert ca = ot::test::makeCa("OpenTunnel Test CA");
  ot::test::TestCert otherCa = ot::test::makeCa("Unrelated CA");
  ot::test::TestCert leaf = ot::test::makeLeaf(ca, "example.test", 2);
  ot::test::TestCert secondLeaf = ot::test::makeLeaf(ca, "second.test", 3);
  std::filesystem::path caFile = writeTemp("ca", ca.certPem);
  std::filesystem::path otherCaFile = writeTemp("other-ca", otherCa.certPem);

  [[nodiscard]] std::string chain() const { return leaf.certPem + ca.certPem; }

  ~EnginePki() {
    std::error_code ec;
    std::filesystem::remove(caFile, ec);
    std::filesystem::remove(otherCaFile, ec);
  }

  static std::filesystem::path writeTemp(const std::string& name, const std::string& pem) {
    auto path = std::filesystem::temp_directory_path() /
                ("ot-tls-test-" + std::to_string(getpid()) + "-" + name + ".pem");
    std::ofstream(path) << pem;
    return path;
  }
};

const EnginePki& enginePki() {
  static const EnginePki instance;
  return instance;
}

ot::tls::SslCtxPtr engineServerCtx(std::vector<std::string> alpn = {"h2", "http/1.1"}) {
  auto ctx =
      ot::tls::makeServerContext(enginePki().chain(), enginePki().leaf.keyPem, std::move(alpn));
  REQUIRE_MESSAGE(ctx.ok(), (ctx.ok() ? "" : ctx.error().message));
  return ctx.value();
}

ot::tls::SslCtxPtr engineClientCtx(std::vector<std::string> alpn = {},
                                   const std::filesystem::path& caFile = enginePki().caFile) {
  auto ctx = ot::tls::makeClientContext(caFile.string(), std::move(alpn));
  REQUIRE_MESSAGE(ctx.ok(), (ctx.ok() ? "" : ctx.error().message));
  return ctx.value();
}

// Moves every pending ciphertext byte from one engine to the other. True if any moved.
bool transfer(TlsEngine& from, TlsEngine& to) {
  if (from.pendingOutputSize() == 0) return false;
  auto bytes = from.takeOutput();
  CHECK(from.pendingOutputSize() == 0);
  to.feed(bytes);
  return true;
}

struct HandshakeOutcome {
  TlsStatus client = TlsStatus::kWantRead;
  TlsStatus server = TlsStatus::kWantRead;
};

// Shuttles bytes until nothing moves any more: both sides finished, or one failed and its alert
// reached the other side.
HandshakeOutcome pump(TlsEngine& client, TlsEngine& server) {
  HandshakeOutcome outcome;
  for (int round = 0; round < 20; ++round) {
    outcome.client = client.handshake();
    bool moved = transfer(client, server);
    outcome.server = server.handshake();
    moved = transfer(server, client) || moved;
    if (!moved) break;
  }
  return outcome;
}

std::vector<uint8_t> bytesOf(std::string_view text) {
  return {text.begin(), text.end()};
}

// Reads everything currently decryptable, in `chunk`-sized calls.
std::vector<uint8_t> drain(TlsEngine& engine, size_t chunk, TlsStatus* last = nullptr) {
  std::vector<uint8_t> all;
  std::vector<uint8_t> buf(chunk);
  for (;;) {
    auto r = engine.read(buf);
    all.insert(all.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(r.bytes));
    if (r.status != TlsStatus::kOk || r.bytes < buf.size()) {
      if (last != nullptr) *last = r.status;
      break;
    }
  }
  return all;
}

// OpenSSL's allocations of a record buffer or more (>= 16 KiB), counted for every test in this
// binary: installed before main, as OpenSSL allows only before its first allocation.
size_t gLargeAllocations = 0;
void* countingMalloc(size_t size, const char*, int) {
  if (size >= 16384) ++gLargeAllocations;
  return std::malloc(size);
}
void* countingRealloc(void* pointer, size_t size, const char*, int) {
  if (size >= 16384) ++gLargeAllocations;
  return std::realloc(pointer, size);
}
void countingFree(void* pointer, const char*, int) {
  std::free(pointer);
}
const bool gCountingInstalled =
    CRYPTO_set_mem_functions(countingMalloc, countingRealloc, countingFree) == 1;

struct Pair {
  std::unique_ptr<TlsEngine> client;
  std::unique_ptr<TlsEngine> server;
};

Pair connected(std::vector<std::string> clientAlpn = {}) {
  Pair pair{TlsEngine::client(engineClientCtx(std::move(clientAlpn)), "example.test"),
            TlsEngine::server(engineServerCtx())};
  REQUIRE(pair.client != nullptr);
  REQUIRE(pair.server != nullptr);
  auto outcome = pump(*pair.client, *pair.server);
  REQUIRE(outcome.client == TlsStatus::kOk);
  REQUIRE(outcome.server == TlsStatus::kOk);
  return pair;
}

}  // namespace

TEST_CASE("tls engine: client and server complete a handshake over memory buffers") {
  auto client = TlsEngine::client(engineClientCtx(), "example.test");
  auto server = TlsEngine::server(engineServerCtx());
  REQUIRE(client != nullptr);
  REQUIRE(server != nullptr);
  CHECK_FALSE(client->handshakeDone());
  CHECK(client->handshake() == TlsStatus::kWantRead);  // ClientHello written, waiting
  CHECK(client->pendingOutputSize() > 0);
  CHECK(server->handshake() == TlsStatus::kWantRead);  // nothing fed yet
  CHECK(server->pendingOutputSize() == 0);

  auto outcome = pump(*client, *server);
  CHECK(outcome.client == TlsStatus::kOk);
  CHECK(outcome.server == TlsStatus::kOk);
  CHECK(client->handshakeDone());
  CHECK(server->handshakeDone());
  CHECK(client->errorText().empty());
  CHECK(server->errorText().empty());
  CHECK(server->serverName() == "example.test");  // SNI seen by the server
  CHECK(client->handshake() == TlsStatus::kOk);   // stays kOk
}

TEST_CASE("tls engine: ALPN follows the server's preference among what the client offers") {
  SUBCASE("client offers only http/1.1") {
    auto pair = connected({"http/1.1"});
    CHECK(pair.client->alpn() == "http/1.1");
    CHECK(pair.server->alpn() == "http/1.1");
  }
  SUBCASE("client offers both, in its own order") {
    auto pair = connected({"http/1.1", "h2"});
    CHECK(pair.client->alpn() == "h2");
    CHECK(pair.server->alpn() == "h2");
  }
  SUBCASE("client offers none") {
    auto pair = connected({});
    CHECK(pair.client->alpn() == "");
    CHECK(pair.server->alpn() == "");
  }
  SUBCASE("no overlap: the handshake proceeds without ALPN") {
    auto pair = connected({"spdy/3"});
    CHECK(pair.client->alpn() == "");
    CHECK(pair.server->alpn() == "");
  }
}

TEST_CASE("tls engine: data flows both ways byte for byte, including 1 MiB in chunks") {
  auto pair = connected();
  auto& client = *pair.client;
  auto& server = *pair.server;

  CHECK(client.write(bytesOf("hello server")) == TlsStatus::kOk);
  transfer(client, server);
  TlsStatus last = TlsStatus::kOk;
  CHECK(drain(server, 4096, &last) == bytesOf("hello server"));
  CHECK(last == TlsStatus::kWantRead);

  CHECK(server.write(bytesOf("hello client")) == TlsStatus::kOk);
  transfer(server, client);
  // The client's read also consumes the TLS 1.3 session tickets queued behind the handshake.
  CHECK(drain(client, 4096, &last) == bytesOf("hello client"));
  CHECK(last == TlsStatus::kWantRead);

  std::vector<uint8_t> payload(1 << 20);
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>((i * 131 + 7) >> 3);
  constexpr size_t kChunk = 10'007;  // not a record-size multiple
  std::vector<uint8_t> received;
  for (size_t off = 0; off < payload.size(); off += kChunk) {
    const size_t n = std::min(kChunk, payload.size() - off);
    REQUIRE(client.write(std::span<const uint8_t>(payload).subspan(off, n)) == TlsStatus::kOk);
    if ((off / kChunk) % 7 == 0) {  // deliver irregularly: several writes per transfer
      transfer(client, server);
      auto part = drain(server, 3000);
      received.insert(received.end(), part.begin(), part.end());
    }
  }
  transfer(client, server);
  auto rest = drain(server, 65536, &last);
  received.insert(received.end(), rest.begin(), rest.end());
  CHECK(last == TlsStatus::kWantRead);
  REQUIRE(received.size() == payload.size());
  CHECK(received == payload);

  // The reverse direction, one big write, read in small pieces.
  REQUIRE(server.write(payload) == TlsStatus::kOk);
  transfer(server, client);
  CHECK(drain(client, 1000) == payload);
  CHECK(client.pendingPlaintext() == 0);

  // Both sides drained: the engines hold no ciphertext.
  client.releaseIdleBuffers();
  server.releaseIdleBuffers();
  CHECK(client.pendingOutputSize() == 0);
  CHECK(server.pendingOutputSize() == 0);
}

TEST_CASE("tls engine: a read smaller than a record leaves the rest pending") {
  auto pair = connected();
  CHECK(pair.server->write(bytesOf("0123456789")) == TlsStatus::kOk);
  transfer(*pair.server, *pair.client);
  std::vector<uint8_t> buf(4);
  auto r = pair.client->read(buf);
  CHECK(r.bytes == 4);
  CHECK(r.status == TlsStatus::kOk);
  CHECK(pair.client->pendingPlaintext() == 6);
  CHECK(drain(*pair.client, 100) == bytesOf("456789"));
}

TEST_CASE("tls engine: a certificate for another name fails verification") {
  auto client = TlsEngine::client(engineClientCtx(), "other.test");
  auto server = TlsEngine::server(engineServerCtx());
  auto outcome = pump(*client, *server);
  CHECK(outcome.client == TlsStatus::kError);
  CHECK_FALSE(client->errorText().empty());
  CHECK(client->errorText().find("hostname mismatch") != std::string::npos);
  CHECK_FALSE(client->handshakeDone());
  // The client's alert reached the server, which fails too.
  CHECK(outcome.server == TlsStatus::kError);
  CHECK_FALSE(server->errorText().empty());
  // Failure is sticky.
  CHECK(client->handshake() == TlsStatus::kError);
  std::vector<uint8_t> buf(16);
  CHECK(client->read(buf).status == TlsStatus::kError);
  CHECK(client->write(bytesOf("x")) == TlsStatus::kError);
}

TEST_CASE("tls engine: without name verification another name is accepted") {
  auto client = TlsEngine::client(engineClientCtx(), "other.test", /*verifyName=*/false);
  auto server = TlsEngine::server(engineServerCtx());
  auto outcome = pump(*client, *server);
  CHECK(outcome.client == TlsStatus::kOk);
  CHECK(outcome.server == TlsStatus::kOk);
  CHECK(server->serverName() == "other.test");
}

TEST_CASE("tls engine: a chain from an unknown CA fails verification") {
  auto client = TlsEngine::client(engineClientCtx({}, enginePki().otherCaFile), "example.test");
  SUBCASE("server sends leaf and CA") {
    auto server = TlsEngine::server(engineServerCtx());
    auto outcome = pump(*client, *server);
    CHECK(outcome.client == TlsStatus::kError);
    CHECK(client->errorText().find("self-signed certificate in certificate chain") !=
          std::string::npos);
    CHECK(outcome.server == TlsStatus::kError);
  }
  SUBCASE("server sends the leaf only") {
    auto ctx = ot::tls::makeServerContext(enginePki().leaf.certPem, enginePki().leaf.keyPem, {});
    REQUIRE(ctx.ok());
    auto server = TlsEngine::server(ctx.value());
    auto outcome = pump(*client, *server);
    CHECK(outcome.client == TlsStatus::kError);
    CHECK(client->errorText().find("unable to get local issuer certificate") != std::string::npos);
    CHECK(outcome.server == TlsStatus::kError);
  }
}

TEST_CASE("tls engine: close_notify reads as kClosed on the peer") {
  auto pair = connected();
  CHECK(pair.client->write(bytesOf("last words")) == TlsStatus::kOk);
  pair.client->shutdown();
  REQUIRE(pair.client->pendingOutputSize() > 0);
  transfer(*pair.client, *pair.server);
  TlsStatus last = TlsStatus::kOk;
  CHECK(drain(*pair.server, 4096, &last) == bytesOf("last words"));
  CHECK(last == TlsStatus::kClosed);
  std::vector<uint8_t> buf(16);
  auto again = pair.server->read(buf);
  CHECK(again.bytes == 0);
  CHECK(again.status == TlsStatus::kClosed);
}

TEST_CASE("tls engine: leafFingerprint is the SHA-256 of the leaf's DER") {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  REQUIRE(X509_digest(enginePki().leaf.cert.get(), EVP_sha256(), md, &len) == 1);
  REQUIRE(len == 32);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string expected;
  for (unsigned int i = 0; i < len; ++i) {
    expected += kHex[md[i] >> 4];
    expected += kHex[md[i] & 0xf];
  }
  const std::string got = ot::tls::leafFingerprint(enginePki().chain());
  CHECK(got.size() == 64);
  CHECK(got == expected);
  CHECK(ot::tls::leafFingerprint(enginePki().secondLeaf.certPem) != got);
  CHECK(ot::tls::leafFingerprint("not a pem") == "");
  CHECK(ot::tls::leafFingerprint("") == "");
}

TEST_CASE("tls engine: makeServerContext rejects a key that does not match the certificate") {
  auto ctx = ot::tls::makeServerContext(enginePki().chain(), enginePki().secondLeaf.keyPem, {"h2"});
  REQUIRE_FALSE(ctx.ok());
  CHECK(ctx.error().kind == ot::ErrorKind::kInvalid);
  CHECK_FALSE(ctx.error().message.empty());

  auto noCert = ot::tls::makeServerContext("garbage", enginePki().leaf.keyPem, {});
  REQUIRE_FALSE(noCert.ok());
  CHECK(noCert.error().kind == ot::ErrorKind::kInvalid);

  auto noKey = ot::tls::makeServerContext(enginePki().chain(), "garbage", {});
  REQUIRE_FALSE(noKey.ok());
  CHECK(noKey.error().kind == ot::ErrorKind::kInvalid);

  auto badAlpn = ot::tls::makeServerContext(enginePki().chain(), enginePki().leaf.keyPem, {""});
  CHECK_FALSE(badAlpn.ok());
}

TEST_CASE("tls engine: makeClientContext reports a missing CA file") {
  auto ctx = ot::tls::makeClientContext("/nonexistent/ca.pem", {});
  REQUIRE_FALSE(ctx.ok());
  CHECK(ctx.error().kind == ot::ErrorKind::kInvalid);
}

TEST_CASE("tls engine: write before the handshake takes nothing") {
  auto client = TlsEngine::client(engineClientCtx(), "example.test");
  CHECK(client->write(bytesOf("early")) == TlsStatus::kWantRead);
  CHECK(client->pendingOutputSize() == 0);
}

TEST_CASE("tls engine: a TLS 1.2-only client still negotiates, with ALPN and data") {
  auto ctx = engineClientCtx({"h2"});
  REQUIRE(SSL_CTX_set_max_proto_version(ctx.get(), TLS1_2_VERSION) == 1);
  auto client = TlsEngine::client(ctx, "example.test");
  auto server = TlsEngine::server(engineServerCtx());
  auto outcome = pump(*client, *server);
  REQUIRE(outcome.client == TlsStatus::kOk);
  REQUIRE(outcome.server == TlsStatus::kOk);
  CHECK(client->alpn() == "h2");
  CHECK(server->serverName() == "example.test");
  CHECK(server->write(bytesOf("over 1.2")) == TlsStatus::kOk);
  transfer(*server, *client);
  CHECK(drain(*client, 64) == bytesOf("over 1.2"));
}

// ---- Ciphertext read in place (lend / keepUnread) ----------------------------------------------

namespace {

std::vector<uint8_t> patterned(size_t size) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>((i * 7 + 3) ^ (i >> 9));
  return bytes;
}

}  // namespace

TEST_CASE(
    "tls engine: lent ciphertext cut anywhere decrypts byte for byte from one reused buffer") {
  auto pair = connected();
  const std::vector<uint8_t> payload = patterned(200'000);
  REQUIRE(pair.client->write(payload) == TlsStatus::kOk);
  const std::vector<uint8_t> wire = pair.client->takeOutput();

  // Like a socket read buffer: each piece is lent from the same buffer, which is scribbled over
  // as soon as the engine gives the loan back. Reads stop early sometimes, so whole records are
  // left over, not only a record cut at the end of a piece.
  std::vector<uint8_t> buffer(65536);
  std::vector<uint8_t> received;
  std::vector<uint8_t> plain(5000);
  const size_t cuts[] = {1, 4, 5, 6, 700, 16'401, 65'536, 3, 20'000};
  size_t offset = 0;
  for (size_t i = 0; offset < wire.size(); ++i) {
    const size_t n = std::min(cuts[i % std::size(cuts)], wire.size() - offset);
    std::copy_n(wire.begin() + static_cast<std::ptrdiff_t>(offset), n, buffer.begin());
    offset += n;
    pair.server->lend(std::span<const uint8_t>(buffer).first(n));
    const int reads = i % 3 == 0 ? 1 : 1000;
    for (int r = 0; r < reads; ++r) {
      const auto result = pair.server->read(plain);
      received.insert(received.end(), plain.begin(),
                      plain.begin() + static_cast<std::ptrdiff_t>(result.bytes));
      REQUIRE(result.status != TlsStatus::kError);
      if (result.bytes < plain.size()) break;
    }
    pair.server->keepUnread();
    std::fill(buffer.begin(), buffer.end(), uint8_t{0xA5});
  }
  TlsStatus last = TlsStatus::kOk;
  const auto rest = drain(*pair.server, 4096, &last);
  received.insert(received.end(), rest.begin(), rest.end());
  CHECK(last == TlsStatus::kWantRead);
  REQUIRE(received.size() == payload.size());
  CHECK(received == payload);
}

TEST_CASE("tls engine: lent ciphertext is read in place, after what was fed before it") {
  auto pair = connected();
  REQUIRE(pair.client->write(bytesOf("first")) == TlsStatus::kOk);
  const std::vector<uint8_t> first = pair.client->takeOutput();
  REQUIRE(pair.client->write(bytesOf("second")) == TlsStatus::kOk);
  std::vector<uint8_t> second = pair.client->takeOutput();
  REQUIRE(pair.client->write(bytesOf("third")) == TlsStatus::kOk);
  const std::vector<uint8_t> third = pair.client->takeOutput();

  // Fed, then lent, then fed again while the loan is out: read in that order.
  pair.server->feed(first);
  pair.server->lend(second);
  pair.server->feed(third);  // ends the loan first (copies what is unread of it)
  std::fill(second.begin(), second.end(), uint8_t{0});
  TlsStatus last = TlsStatus::kOk;
  CHECK(drain(*pair.server, 4096, &last) == bytesOf("firstsecondthird"));
  CHECK(last == TlsStatus::kWantRead);

  // No copy while lent: a byte changed under the loan is what the engine reads (the record's
  // tag no longer matches), so nothing was queued on the way in.
  REQUIRE(pair.client->write(bytesOf("in place")) == TlsStatus::kOk);
  std::vector<uint8_t> record = pair.client->takeOutput();
  pair.server->lend(record);
  record[record.size() / 2] ^= 0x01;
  std::vector<uint8_t> buf(100);
  CHECK(pair.server->read(buf).status == TlsStatus::kError);
}

TEST_CASE("tls engine: reading one small record allocates OpenSSL's record buffer once") {
  // Idle bridges read a pong per heartbeat: a second SSL_read that can only answer "want read"
  // made OpenSSL allocate and free another 16 KiB record buffer (SSL_MODE_RELEASE_BUFFERS).
  REQUIRE(gCountingInstalled);
  auto pair = connected();
  std::vector<uint8_t> buf(4096);
  for (const bool lent : {true, false}) {
    CAPTURE(lent);
    REQUIRE(pair.client->write(bytesOf("pong")) == TlsStatus::kOk);
    const std::vector<uint8_t> record = pair.client->takeOutput();
    if (lent) {
      pair.server->lend(record);
    } else {
      pair.server->feed(record);
    }
    const size_t before = gLargeAllocations;
    const auto result = pair.server->read(buf);
    const size_t allocations = gLargeAllocations - before;
    pair.server->keepUnread();
    CHECK(result.bytes == 4);
    CHECK(result.status == TlsStatus::kWantRead);
    CHECK(allocations == 1);
  }
  // Two records in one read still both come out.
  REQUIRE(pair.client->write(bytesOf("one")) == TlsStatus::kOk);
  REQUIRE(pair.client->write(bytesOf("two")) == TlsStatus::kOk);
  const std::vector<uint8_t> both = pair.client->takeOutput();
  pair.server->lend(both);
  const auto result = pair.server->read(buf);
  pair.server->keepUnread();
  CHECK(result.bytes == 6);
  CHECK(std::string(buf.begin(), buf.begin() + 6) == "onetwo");
}
