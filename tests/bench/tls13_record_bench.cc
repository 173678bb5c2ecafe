// ot_tls13_record_bench: what the detached record layer (common/tls13_record.h) costs per call,
// against OpenSSL running the same connection (docs/capacity.md, "The detached TLS record
// layer"). Built with everything else, never run by CI: it prints numbers and checks nothing.
//
// - the key set on the thread's EVP_CIPHER_CTX once per call ("rekey"): one record per call
//   against 64 records per call, per record;
// - a ping/pong exchange as relayd's side of an idle bridge does it: read one small record from
//   the peer (lend + read) and write a small answer (write + takeOutput), by an engine still on
//   OpenSSL and by a detached one, on the same handshake.
//
//   ot_tls13_record_bench [--iterations 200000]

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/tls13_record.h"
#include "common/tls_engine.h"
#include "tests/unit/test_certs.h"

using namespace ot;
using Clock = std::chrono::steady_clock;

namespace {

double nsSince(Clock::time_point start, size_t n) {
  return static_cast<double>(
             std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count()) /
         static_cast<double>(n);
}

void recordLayerCosts(size_t iterations) {
  const std::vector<uint8_t> ping = {0x89, 0x04, 'p', 'i', 'n', 'g'};
  for (auto suite : {tls13::Suite::kAes128GcmSha256, tls13::Suite::kAes256GcmSha384,
                     tls13::Suite::kChacha20Poly1305Sha256}) {
    const std::vector<uint8_t> secret(tls13::hashSize(suite), 7);
    tls13::RecordLayer writer(suite, secret, 0, secret, 0);
    std::vector<uint8_t> out;
    out.reserve(1 << 16);
    auto start = Clock::now();
    for (size_t i = 0; i < iterations; ++i) {
      out.clear();
      (void)writer.seal(ping, out);
    }
    const double sealOne = nsSince(start, iterations);
    // 64 records from the peer: opened one per call (the key set each time), then all in one.
    std::vector<uint8_t> sealed;
    tls13::RecordLayer peer(suite, secret, 0, secret, 0);
    for (size_t i = 0; i < 64; ++i) (void)peer.seal(ping, sealed);
    const size_t recordSize = sealed.size() / 64;
    tls13::RecordLayer reader(suite, secret, 0, secret, 0);
    std::vector<uint8_t> plain(1 << 16);
    std::vector<uint8_t> toSend;
    const size_t rounds = iterations / 64;
    start = Clock::now();
    for (size_t i = 0; i < rounds; ++i) {
      reader.setSequenceNumbers(0, 0);
      for (size_t k = 0; k < 64; ++k)
        (void)reader.open({sealed.data() + k * recordSize, recordSize}, plain, toSend);
    }
    const double openOne = nsSince(start, rounds * 64);
    start = Clock::now();
    for (size_t i = 0; i < rounds; ++i) {
      reader.setSequenceNumbers(0, 0);
      (void)reader.open(sealed, plain, toSend);
    }
    const double openBatch = nsSince(start, rounds * 64);
    // Key derivation: a layer made from two secrets (4 HKDF-Expand-Label), and one KeyUpdate.
    const size_t makes = iterations / 20;
    start = Clock::now();
    for (size_t i = 0; i < makes; ++i) {
      tls13::RecordLayer made(suite, secret, 0, secret, 0);
      if (!made.valid()) std::abort();
    }
    const double make = nsSince(start, makes);
    tls13::TrafficKeys keys;
    (void)tls13::deriveTrafficKeys(suite, secret, keys);
    start = Clock::now();
    for (size_t i = 0; i < makes; ++i) (void)tls13::updateTrafficKeys(suite, keys);
    const double keyUpdate = nsSince(start, makes);
    std::printf(
        "%-18s seal of one 6-byte record per call %4.0f ns; open, one record per call "
        "%4.0f ns, 64 per call %4.0f ns: the key set per call (rekey) ~%.0f ns%s\n",
        suite == tls13::Suite::kAes128GcmSha256   ? "AES-128-GCM:"
        : suite == tls13::Suite::kAes256GcmSha384 ? "AES-256-GCM:"
                                                  : "ChaCha20-Poly1305:",
        sealOne, openOne, openBatch, openOne - openBatch, reader.failed() ? " (FAILED)" : "");
    std::printf("%-18s a layer keyed from two secrets %5.0f ns; a KeyUpdate step %5.0f ns\n", "",
                make, keyUpdate);
    // Idle bridges: each record another connection's, as relayd's pings go out one wheel slot at
    // a time; 2,000 layers of their own keys, one record sealed per call, in turn.
    std::vector<std::unique_ptr<tls13::RecordLayer>> layers;
    for (size_t c = 0; c < 2000; ++c) {
      std::vector<uint8_t> own(tls13::hashSize(suite), static_cast<uint8_t>(c));
      own[1] = static_cast<uint8_t>(c >> 8);
      layers.push_back(std::make_unique<tls13::RecordLayer>(suite, own, 0, own, 0));
    }
    start = Clock::now();
    for (size_t i = 0; i < iterations; ++i) {
      out.clear();
      (void)layers[i % layers.size()]->seal(ping, out);
    }
    std::printf("%-18s seal of one record per call, each another of 2,000 connections %4.0f ns\n",
                "", nsSince(start, iterations));
  }
}

}  // namespace

int main(int argc, char** argv) {
  size_t iterations = 200000;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--iterations") == 0)
      iterations = std::strtoull(argv[i + 1], nullptr, 10);
  recordLayerCosts(iterations);

  // The ping/pong exchange on an engine pair: OpenSSL kept, then detached.
  auto ca = test::makeCa("Bench CA");
  auto leaf = test::makeLeaf(ca, "api.example.test");
  const test::CaFile caFile(ca, "tls13-record-bench");
  auto serverCtx = tls::makeServerContext(leaf.certPem + ca.certPem, leaf.keyPem, {"http/1.1"});
  auto clientCtx = tls::makeClientContext(caFile.string(), {"http/1.1"});
  if (!serverCtx || !clientCtx) return 1;
  const std::vector<uint8_t> ping = {0x89, 0x84, 0, 0, 0, 0, 'p', 'i', 'n', 'g'};
  const std::vector<uint8_t> pong = {0x8a, 0x04, 'p', 'i', 'n', 'g'};
  for (bool detach : {false, true}) {
    auto client = tls::TlsEngine::client(*clientCtx, "api.example.test");
    auto server = tls::TlsEngine::server(*serverCtx, detach);
    for (int round = 0; round < 10; ++round) {
      (void)client->handshake();
      server->feed(client->takeOutput());
      (void)server->handshake();
      client->feed(server->takeOutput());
    }
    if (detach) server->releaseHandshakeState();
    (void)server->write(pong);  // the write proof
    client->feed(server->takeOutput());
    std::vector<uint8_t> plain(65536);
    (void)client->read(plain);
    // The client's pings, one record each, made in advance.
    const size_t n = iterations / 4;
    std::vector<std::vector<uint8_t>> records;
    for (size_t i = 0; i < n + 1; ++i) {
      (void)client->write(ping);
      records.push_back(client->takeOutput());
    }
    server->lend(records[0]);  // the read proof (detached) or a first read
    (void)server->read(plain);
    server->keepUnread();
    const auto start = Clock::now();
    for (size_t i = 1; i <= n; ++i) {
      server->lend(records[i]);
      (void)server->read(plain);
      server->keepUnread();
      (void)server->write(pong);
      (void)server->takeOutput();
    }
    std::printf(
        "ping/pong on the server engine (read a 10-byte record, write a 6-byte one), %s: "
        "%.0f ns per exchange\n",
        server->detached() ? "detached" : "OpenSSL", nsSince(start, n));
  }
  // What the switch costs one connection (the keys, both proofs, SSL_free) against the same
  // first exchange on OpenSSL, and what freeing a kept engine (SSL_free) costs at close.
  for (bool detach : {false, true}) {
    const size_t connections = 300;
    double switchNs = 0;
    double freeNs = 0;
    for (size_t c = 0; c < connections; ++c) {
      auto client = tls::TlsEngine::client(*clientCtx, "api.example.test");
      auto server = tls::TlsEngine::server(*serverCtx, detach);
      for (int round = 0; round < 10; ++round) {
        (void)client->handshake();
        server->feed(client->takeOutput());
        (void)server->handshake();
        client->feed(server->takeOutput());
      }
      (void)client->write(ping);
      const std::vector<uint8_t> first = client->takeOutput();
      std::vector<uint8_t> plain(4096);
      auto start = Clock::now();
      if (detach) server->releaseHandshakeState();
      (void)server->write(pong);
      (void)server->takeOutput();
      server->lend(first);
      (void)server->read(plain);
      server->keepUnread();
      switchNs += nsSince(start, 1);
      if (server->detached() != detach) std::abort();
      start = Clock::now();
      server.reset();
      freeNs += nsSince(start, 1);
    }
    std::printf(
        "first answer + first read after the upgrade, %s: %.0f ns; freeing the engine "
        "at close %.0f ns\n",
        detach ? "with the switch (keys, proofs, SSL_free)" : "on OpenSSL", switchNs / connections,
        freeNs / connections);
  }
  return 0;
}
