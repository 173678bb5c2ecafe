// HandshakeWorkers: real OpenSSL handshakes whose server steps run on the worker threads and come
// back on a real libuv loop; the thread each step ran on is recorded by OpenSSL's info callback.
#include "relayd/handshake_workers.h"

#include <doctest/doctest.h>
#include <openssl/ssl.h>

#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/tls_engine.h"
#include "common/tls_stream.h"
#include "tests/unit/test_certs.h"

namespace {

using ot::relayd::HandshakeWorkers;
using ot::tls::TlsEngine;
using ot::tls::TlsStatus;
using ot::tls::TlsStream;

struct WorkerPki {
  ot::test::TestCert ca = ot::test::makeCa("Handshake Workers Test CA");
  ot::test::TestCert leaf = ot::test::makeLeaf(ca, "workers.test", 2);
};

const WorkerPki& pki() {
  static const WorkerPki instance;
  return instance;
}

std::mutex stepThreadsMutex;
std::set<std::thread::id> stepThreads;  // where the servers' handshakes started

ot::tls::SslCtxPtr serverContext() {
  auto ctx = ot::tls::makeServerContext(pki().leaf.certPem + pki().ca.certPem, pki().leaf.keyPem,
                                        {"http/1.1"});
  REQUIRE(ctx.ok());
  SSL_CTX_set_info_callback(ctx.value().get(), [](const SSL*, int where, int) {
    if ((where & SSL_CB_HANDSHAKE_START) != 0) {
      const std::lock_guard lock(stepThreadsMutex);
      stepThreads.insert(std::this_thread::get_id());
    }
  });
  return ctx.value();
}

ot::tls::SslCtxPtr clientContext() {
  static const ot::test::CaFile caFile(pki().ca, "handshake-workers");
  auto ctx = ot::tls::makeClientContext(caFile.string(), {"http/1.1"});
  REQUIRE(ctx.ok());
  return ctx.value();
}

struct Server final : TlsStream::Owner {
  Server(ot::tls::SslCtxPtr ctx, ot::tls::HandshakeRunner* runner)
      : buffer(16 * 1024), tls(TlsEngine::server(std::move(ctx)), *this, buffer) {
    tls.runHandshakeOn(runner);
  }
  bool sendCiphertext(std::vector<uint8_t> bytes) override {
    outbox.insert(outbox.end(), bytes.begin(), bytes.end());
    return true;
  }
  void onTlsHandshakeDone() override { ++handshakes; }
  void onTlsPlaintext(std::span<uint8_t> bytes) override {
    received.append(bytes.begin(), bytes.end());
  }
  void onTlsCloseNotify() override {}
  void onTlsFailed() override { ++failures; }
  [[nodiscard]] bool wantsTlsPlaintext() const override { return tls.handshakeDone(); }

  std::vector<uint8_t> buffer;
  TlsStream tls;
  std::vector<uint8_t> outbox;
  std::string received;
  int handshakes = 0;
  int failures = 0;
};

struct Pair {
  std::unique_ptr<TlsEngine> client;
  std::unique_ptr<Server> server;
};

Pair startPair(const ot::tls::SslCtxPtr& serverCtx, HandshakeWorkers& workers) {
  Pair pair{TlsEngine::client(clientContext(), "workers.test", true),
            std::make_unique<Server>(serverCtx, &workers)};
  REQUIRE(pair.client->handshake() == TlsStatus::kWantRead);
  const std::vector<uint8_t> hello = pair.client->takeOutput();
  pair.server->tls.receive(hello);
  return pair;
}

// Moves what each server sent to its client, and the client's answer (with `data` once its side
// is done) back. True when something moved.
bool shuttle(std::vector<Pair>& pairs, const std::string& data) {
  bool moved = false;
  for (Pair& pair : pairs) {
    if (pair.server->outbox.empty()) continue;
    moved = true;
    pair.client->feed(pair.server->outbox);
    pair.server->outbox.clear();
    const bool wasDone = pair.client->handshakeDone();
    (void)pair.client->handshake();
    if (!wasDone && pair.client->handshakeDone()) {
      REQUIRE(pair.client->write({reinterpret_cast<const uint8_t*>(data.data()), data.size()}) ==
              TlsStatus::kOk);
    }
    if (pair.client->pendingOutputSize() > 0) {
      const std::vector<uint8_t> answer = pair.client->takeOutput();
      pair.server->tls.receive(answer);
    }
  }
  return moved;
}

}  // namespace

TEST_CASE("handshake workers: how many TLS_HANDSHAKE_THREADS means") {
  using ot::relayd::handshakeWorkerCount;
  CHECK(handshakeWorkerCount(-1, 1) == 0);  // the loop does its own handshakes
  CHECK(handshakeWorkerCount(-1, 2) == 0);  // the second core is controld's and the kernel's
  CHECK(handshakeWorkerCount(-1, 3) == 1);
  CHECK(handshakeWorkerCount(-1, 4) == 2);
  CHECK(handshakeWorkerCount(-1, 64) == 8);
  CHECK(handshakeWorkerCount(0, 8) == 0);
  CHECK(handshakeWorkerCount(3, 1) == 3);
  CHECK(ot::relayd::usableCores() >= 1);
}

TEST_CASE("handshake workers: the server's steps run on the workers, the rest on the loop") {
  uv_loop_t loop;
  REQUIRE(uv_loop_init(&loop) == 0);
  std::string error;
  auto workers = HandshakeWorkers::create(&loop, 2, nullptr, error);
  REQUIRE_MESSAGE(workers != nullptr, error);
  CHECK(workers->threads() == 2);
  {
    const std::lock_guard lock(stepThreadsMutex);
    stepThreads.clear();
  }
  const auto serverCtx = serverContext();
  constexpr size_t kPairs = 24;
  std::vector<Pair> pairs;
  for (size_t i = 0; i < kPairs; ++i) pairs.push_back(startPair(serverCtx, *workers));
  CHECK(workers->outstanding() == kPairs);

  const std::string data = "first request";
  size_t idleRounds = 0;
  while (idleRounds < 1000) {
    (void)uv_run(&loop, UV_RUN_NOWAIT);
    const bool moved = shuttle(pairs, data);
    bool all = true;
    for (const Pair& pair : pairs) all = all && pair.server->received == data;
    if (all) break;
    // Nothing moved and nothing out: stuck (bounded, so a bug fails instead of hanging).
    if (!moved && workers->outstanding() == 0) ++idleRounds;
    if (!moved && workers->outstanding() > 0) (void)uv_run(&loop, UV_RUN_ONCE);
  }
  for (const Pair& pair : pairs) {
    CHECK(pair.server->handshakes == 1);
    CHECK(pair.server->failures == 0);
    CHECK(pair.server->received == data);
    CHECK(pair.server->tls.alpn() == "http/1.1");
  }
  CHECK(workers->outstanding() == 0);
  {
    const std::lock_guard lock(stepThreadsMutex);
    CHECK_FALSE(stepThreads.empty());
    CHECK(stepThreads.count(std::this_thread::get_id()) == 0);  // never on the loop's thread
  }
  workers->closeHandles();
  CHECK(uv_run(&loop, UV_RUN_DEFAULT) == 0);
  CHECK(uv_loop_close(&loop) == 0);
}

TEST_CASE("handshake workers: a stream freed during its step, and steps cut off by shutdown") {
  uv_loop_t loop;
  REQUIRE(uv_loop_init(&loop) == 0);
  std::string error;
  auto workers = HandshakeWorkers::create(&loop, 1, nullptr, error);
  REQUIRE(workers != nullptr);
  const auto serverCtx = serverContext();

  // Freed while its step runs: the step finishes on the orphaned engine, freed on delivery.
  Pair gone = startPair(serverCtx, *workers);
  gone.server.reset();
  while (workers->outstanding() > 0) (void)uv_run(&loop, UV_RUN_ONCE);

  // Shutdown with steps out (queued behind one another on the single worker): none is
  // delivered, every stream has its engine back.
  std::vector<Pair> pairs;
  for (int i = 0; i < 16; ++i) pairs.push_back(startPair(serverCtx, *workers));
  workers->closeHandles();
  for (const Pair& pair : pairs) {
    CHECK_FALSE(pair.server->tls.stepRunning());
    CHECK(pair.server->handshakes == 0);
    CHECK(pair.server->failures == 0);
  }
  // After close a step runs at once on the caller's thread.
  Pair late = startPair(serverCtx, *workers);
  CHECK_FALSE(late.server->tls.stepRunning());
  CHECK_FALSE(late.server->outbox.empty());
  CHECK(uv_run(&loop, UV_RUN_DEFAULT) == 0);
  CHECK(uv_loop_close(&loop) == 0);
}
