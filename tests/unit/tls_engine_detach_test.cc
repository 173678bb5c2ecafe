// TlsEngine's detached mode against the real OpenSSL: a client engine (makeClientContext, plain
// OpenSSL) and a server engine that releases its handshake state and switches to the record
// layer (common/tls13_record.h) once both sequence numbers are proven.
#include <doctest/doctest.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/tls_engine.h"
#include "common/tls_sessions.h"
#include "tests/unit/test_certs.h"

using ot::tls::DetachResult;
using ot::tls::TlsEngine;
using ot::tls::TlsStatus;

namespace {

using Bytes = std::vector<uint8_t>;

struct Pki {
  ot::test::TestCert ca = ot::test::makeCa("OpenTunnel Detach CA");
  ot::test::TestCert leaf = ot::test::makeLeaf(ca, "example.test", 2);
  ot::test::CaFile caFile{ca, "tls-detach"};
};

const Pki& pki() {
  static const Pki instance;
  return instance;
}

ot::tls::SslCtxPtr serverCtx() {
  auto ctx = ot::tls::makeServerContext(pki().leaf.certPem + pki().ca.certPem, pki().leaf.keyPem,
                                        {"h2", "http/1.1"});
  REQUIRE(ctx.ok());
  return ctx.value();
}

ot::tls::SslCtxPtr clientCtx(const char* suites = nullptr, bool tls12 = false) {
  auto ctx = ot::tls::makeClientContext(pki().caFile.string(), {"http/1.1"});
  REQUIRE(ctx.ok());
  if (suites != nullptr) REQUIRE(SSL_CTX_set_ciphersuites(ctx.value().get(), suites) == 1);
  if (tls12) REQUIRE(SSL_CTX_set_max_proto_version(ctx.value().get(), TLS1_2_VERSION) == 1);
  return ctx.value();
}

Bytes text(const std::string& s) {
  return {s.begin(), s.end()};
}

Bytes pattern(size_t n, uint8_t seed) {
  Bytes out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed + i * 7);
  return out;
}

// One side's engine plus what it has read so far and how its last read ended.
struct Side {
  explicit Side(std::unique_ptr<TlsEngine> e) : engine(std::move(e)) {}
  std::unique_ptr<TlsEngine> engine;
  Bytes got;
  TlsStatus last = TlsStatus::kOk;
  size_t chunk = 65536;

  void take(const Bytes& ciphertext, bool lend) {
    if (ciphertext.empty()) return;
    if (lend) {
      engine->lend(ciphertext);
    } else {
      engine->feed(ciphertext);
    }
    if (!engine->handshakeDone()) (void)engine->handshake();
    if (engine->handshakeDone()) {
      Bytes buf(chunk);
      for (;;) {
        const auto r = engine->read(buf);
        got.insert(got.end(), buf.begin(), buf.begin() + static_cast<long>(r.bytes));
        last = r.status;
        if (r.status != TlsStatus::kOk) break;
      }
    }
    if (lend) engine->keepUnread();
  }
};

struct Link {
  Side client;
  Side server;
  bool lend = false;

  // Shuttles bytes both ways until nothing moves.
  void pump() {
    for (int round = 0; round < 50; ++round) {
      if (!client.engine->handshakeDone()) (void)client.engine->handshake();
      const Bytes toServer = client.engine->takeOutput();
      server.take(toServer, lend);
      const Bytes toClient = server.engine->takeOutput();
      client.take(toClient, lend);
      if (toServer.empty() && toClient.empty()) return;
    }
    FAIL("the link never settled");
  }

  // Both ways: `n` bytes each, then checks they arrived.
  void exchange(size_t n, uint8_t seed) {
    client.got.clear();
    server.got.clear();
    const Bytes up = pattern(n, seed);
    const Bytes down = pattern(n, static_cast<uint8_t>(seed + 1));
    REQUIRE(client.engine->write(up) == TlsStatus::kOk);
    REQUIRE(server.engine->write(down) == TlsStatus::kOk);
    pump();
    CHECK(server.got.size() == up.size());
    CHECK(server.got == up);
    CHECK(client.got == down);
  }
};

Link connect(ot::tls::SslCtxPtr clientContext, ot::tls::SslCtxPtr serverContext = serverCtx(),
             bool keepSecrets = true) {
  Link link{Side(TlsEngine::client(std::move(clientContext), "example.test")),
            Side(TlsEngine::server(std::move(serverContext), keepSecrets))};
  REQUIRE(link.client.engine);
  REQUIRE(link.server.engine);
  link.pump();
  REQUIRE(link.client.engine->handshakeDone());
  REQUIRE(link.server.engine->handshakeDone());
  return link;
}

// The usual bridge life: the owner asks, answers (the write proof), and the next record from the
// client proves the read side.
void detach(Link& link) {
  link.server.engine->releaseHandshakeState();
  CHECK_FALSE(link.server.engine->detached());
  link.exchange(100, 1);
  CHECK(link.server.engine->detached());
  CHECK(link.server.engine->takeDetachResult() == DetachResult::kDetached);
  CHECK(link.server.engine->takeDetachResult() == DetachResult::kNone);  // once
}

}  // namespace

TEST_CASE("tls detach: data flows both ways across the switch, small and large") {
  for (bool lend : {false, true}) {
    CAPTURE(lend);
    Link link = connect(clientCtx());
    link.lend = lend;
    link.exchange(10, 9);  // before anything is asked: plain OpenSSL
    detach(link);
    CHECK(link.server.engine->alpn() == "http/1.1");
    CHECK(link.server.engine->serverName() == "example.test");
    CHECK_FALSE(link.server.engine->sessionReused());
    for (size_t n : {size_t{1}, size_t{16384}, size_t{16385}, size_t{100000}}) {
      CAPTURE(n);
      link.exchange(n, 3);
    }
    // A small read span: records wait in the held buffer and come out in pieces.
    link.server.chunk = 100;
    link.exchange(40000, 5);
    CHECK(link.server.engine->pendingPlaintext() == 0);
  }
}

TEST_CASE("tls detach: records in flight at the switch, and data coalesced with Finished") {
  auto client = clientCtx();
  Link link{Side(TlsEngine::client(client, "example.test")),
            Side(TlsEngine::server(serverCtx(), true))};
  // ClientHello -> server flight -> the client's Finished with its first data in one piece.
  (void)link.client.engine->handshake();
  link.server.take(link.client.engine->takeOutput(), false);
  link.client.take(link.server.engine->takeOutput(), false);
  REQUIRE(link.client.engine->handshakeDone());
  REQUIRE(link.client.engine->write(text("early")) == TlsStatus::kOk);
  link.server.take(link.client.engine->takeOutput(), false);
  REQUIRE(link.server.engine->handshakeDone());
  CHECK(link.server.got == text("early"));
  link.server.engine->releaseHandshakeState();
  // The server's tickets and its first answer (the write proof) reach the client together, and
  // the client has two records under way when the server switches on the first.
  REQUIRE(link.server.engine->write(text("answer")) == TlsStatus::kOk);
  REQUIRE(link.client.engine->write(text("one")) == TlsStatus::kOk);
  REQUIRE(link.client.engine->write(text("two")) == TlsStatus::kOk);
  const Bytes inFlight = link.client.engine->takeOutput();
  REQUIRE(link.server.engine->write(text("-more")) == TlsStatus::kOk);
  link.server.take(inFlight, true);
  CHECK(link.server.engine->detached());
  CHECK(link.server.got == text("earlyonetwo"));
  link.pump();
  CHECK(link.client.got == text("answer-more"));
  link.exchange(5000, 2);
}

TEST_CASE("tls detach: the client's KeyUpdate, requested and not, after the switch") {
  Link link = connect(clientCtx());
  detach(link);
  for (bool requested : {true, false, true}) {
    CAPTURE(requested);
    REQUIRE(link.client.engine->keyUpdate(requested));
    link.exchange(3000, 7);
    link.exchange(20, 8);
  }
  CHECK(link.server.engine->detached());
}

TEST_CASE("tls detach: close_notify both ways") {
  SUBCASE("the detached server closes") {
    Link link = connect(clientCtx());
    detach(link);
    link.server.engine->shutdown();
    link.pump();
    CHECK(link.client.last == TlsStatus::kClosed);
  }
  SUBCASE("the client closes") {
    Link link = connect(clientCtx());
    detach(link);
    REQUIRE(link.client.engine->write(text("last")) == TlsStatus::kOk);
    link.client.engine->shutdown();
    link.server.got.clear();
    link.pump();
    CHECK(link.server.got == text("last"));
    CHECK(link.server.last == TlsStatus::kClosed);
  }
  SUBCASE("a tampered record fails the detached server with an alert the client sees") {
    Link link = connect(clientCtx());
    detach(link);
    REQUIRE(link.client.engine->write(text("x")) == TlsStatus::kOk);
    Bytes bad = link.client.engine->takeOutput();
    bad.back() ^= 1;
    link.server.take(bad, false);
    CHECK(link.server.last == TlsStatus::kError);
    CHECK(link.server.engine->errorText().find("bad record mac") != std::string::npos);
    link.client.take(link.server.engine->takeOutput(), false);
    CHECK(link.client.last == TlsStatus::kError);
  }
}

TEST_CASE("tls detach: a resumed handshake detaches too") {
  auto client = clientCtx();
  ot::tls::keepClientSessions(client.get());
  auto server = serverCtx();
  {
    Link first = connect(client, server);
    first.exchange(10, 1);  // the tickets arrive
  }
  Link link = connect(client, server);
  CHECK(link.server.engine->sessionReused());
  detach(link);
  CHECK(link.server.engine->sessionReused());
  link.exchange(2000, 4);
}

TEST_CASE("tls detach: each TLS 1.3 suite") {
  for (const char* suite :
       {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}) {
    CAPTURE(suite);
    Link link = connect(clientCtx(suite));
    detach(link);
    link.exchange(30000, 6);
    REQUIRE(link.client.engine->keyUpdate(true));
    link.exchange(100, 2);
  }
}

TEST_CASE("tls detach: what stays on OpenSSL, and still works") {
  SUBCASE("TLS 1.2") {
    Link link = connect(clientCtx(nullptr, true));
    link.server.engine->releaseHandshakeState();
    CHECK(link.server.engine->takeDetachResult() == DetachResult::kKeptTls12);
    link.exchange(20000, 3);
    CHECK_FALSE(link.server.engine->detached());
  }
  SUBCASE("an engine that keeps no secrets") {
    Link link = connect(clientCtx(), serverCtx(), false);
    link.server.engine->releaseHandshakeState();
    CHECK(link.server.engine->takeDetachResult() == DetachResult::kKeptNoSecrets);
    link.exchange(200, 3);
    CHECK_FALSE(link.server.engine->detached());
  }
  SUBCASE("the client's KeyUpdate read by OpenSSL before the write proof: the read proof fails") {
    Link link = connect(clientCtx());
    link.server.engine->releaseHandshakeState();
    REQUIRE(link.client.engine->keyUpdate(false));  // OpenSSL's read key moves, not its write key
    REQUIRE(link.client.engine->write(text("a")) == TlsStatus::kOk);
    link.pump();
    CHECK(link.server.got == text("a"));
    link.exchange(50, 2);  // the write proof holds; the next record is under the new read key
    CHECK(link.server.engine->takeDetachResult() == DetachResult::kKeptUnproven);
    CHECK_FALSE(link.server.engine->detached());
    link.exchange(5000, 3);
  }
  SUBCASE("closed before the proof: nothing to report") {
    Link link = connect(clientCtx());
    link.server.engine->releaseHandshakeState();
    link.server.engine->shutdown();
    link.pump();
    CHECK(link.client.last == TlsStatus::kClosed);
    CHECK(link.server.engine->takeDetachResult() == DetachResult::kNone);
  }
  SUBCASE("a KeyUpdate OpenSSL answered before the proof") {
    Link link = connect(clientCtx());
    REQUIRE(link.client.engine->keyUpdate(true));
    link.exchange(50, 1);  // the server's OpenSSL moved both its keys
    link.server.engine->releaseHandshakeState();
    link.exchange(50, 2);
    CHECK(link.server.engine->takeDetachResult() == DetachResult::kKeptUnproven);
    CHECK_FALSE(link.server.engine->detached());
    link.exchange(5000, 3);
  }
}

TEST_CASE("tls detach: a client engine detaches too (otunnel's bridge), alone or with the server") {
  for (bool serverToo : {false, true}) {
    for (bool lend : {false, true}) {
      CAPTURE(serverToo);
      CAPTURE(lend);
      auto client = clientCtx();
      ot::tls::keepClientSessions(client.get());
      Link link{Side(TlsEngine::client(client, "example.test", true, {}, true)),
                Side(TlsEngine::server(serverCtx(), true))};
      link.lend = lend;
      link.pump();
      REQUIRE(link.client.engine->handshakeDone());
      link.exchange(10, 9);  // the upgrade: the server's tickets come before its answer
      if (serverToo) link.server.engine->releaseHandshakeState();
      link.client.engine->releaseHandshakeState();
      CHECK_FALSE(link.client.engine->detached());
      link.exchange(100, 1);  // the client's write proves its write side, the answer its read
      CHECK(link.client.engine->detached());
      CHECK(link.client.engine->takeDetachResult() == DetachResult::kDetached);
      CHECK(link.server.engine->detached() == serverToo);
      CHECK(link.client.engine->alpn() == "http/1.1");
      for (size_t n : {size_t{1}, size_t{16384}, size_t{16385}, size_t{100000}}) {
        CAPTURE(n);
        link.exchange(n, 3);
      }
      // A KeyUpdate the server asks for is answered by the client's record layer.
      if (!serverToo) {
        REQUIRE(link.server.engine->keyUpdate(true));
        link.exchange(3000, 7);
        link.exchange(20, 8);
      }
      link.client.engine->shutdown();
      link.pump();
      CHECK(link.server.last == TlsStatus::kClosed);
    }
  }
}

TEST_CASE("tls detach: a client engine that keeps no secrets stays on OpenSSL") {
  Link link = connect(clientCtx());
  link.exchange(10, 9);
  link.client.engine->releaseHandshakeState();
  CHECK(link.client.engine->takeDetachResult() == DetachResult::kKeptNoSecrets);
  link.exchange(5000, 3);
  CHECK_FALSE(link.client.engine->detached());
}
