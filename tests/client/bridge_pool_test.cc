// The pool as otunnel's main uses it: stopping (also mid-attempt), being destroyed without a
// stop, and a renewed certificate reaching new visitors.
#include "client/bridge_pool.h"

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "common/tls_engine.h"
#include "tests/client/fake_relay.h"
#include "tests/client/test_support.h"

using namespace ot::client_test;
using ot::client::BridgeConfig;
using ot::client::BridgePool;

TEST_CASE("client pool: stop() closes every bridge and handle, then calls done once") {
  TestLoop loop;
  FakeRelay relay(loop);
  BridgeConfig config = testConfig(relay.port(), 1, false);
  config.links = 2;
  auto pool = std::make_unique<BridgePool>(loop.get(), config, nullptr);
  pool->start();
  REQUIRE(loop.runUntil([&] { return relay.attachedCount() == 2; }));
  int done = 0;
  pool->stop([&] { ++done; });
  REQUIRE(loop.runUntil([&] { return done == 1; }));
  CHECK(pool->status().attached == 0);
  pool.reset();
  REQUIRE(loop.runUntil([&] { return relay.bridge(0).tcpClosed && relay.bridge(1).tcpClosed; }));
  CHECK(relay.bridge(0).closeCodes == std::vector<uint16_t>{1001});
  CHECK(relay.bridge(1).closeCodes == std::vector<uint16_t>{1001});
  relay.close();
  REQUIRE(loop.runUntil([&] { return relay.openHandles == 0; }));
  CHECK(loop.handleCount() == 0);
  loop.runFor(50);
  CHECK(done == 1);
}

TEST_CASE("client pool: stop() in the middle of an attempt, and before start()") {
  TestLoop loop;
  // A listener that accepts and never speaks TLS: the attempt hangs in its handshake.
  LocalServer mute(loop.get(), LocalServer::Mode::kSink);
  BridgeConfig config = testConfig(mute.port(), 1, false);
  auto pool = std::make_unique<BridgePool>(loop.get(), config, nullptr);
  pool->start();
  REQUIRE(loop.runUntil([&] { return mute.conns().size() == 1; }));
  bool done = false;
  pool->stop([&] { done = true; });
  REQUIRE(loop.runUntil([&] { return done; }, 2000));  // no close handshake to wait for
  pool.reset();

  auto idle = std::make_unique<BridgePool>(loop.get(), config, nullptr);
  bool idleDone = false;
  idle->stop([&] { idleDone = true; });
  REQUIRE(loop.runUntil([&] { return idleDone; }));
  idle.reset();
  mute.close();
  REQUIRE(loop.runUntil([&] { return loop.handleCount() == 0; }));
}

TEST_CASE("client pool: destroyed without stop(), it closes itself in the background") {
  TestLoop loop;
  FakeRelay relay(loop);
  int reports = 0;
  auto pool = std::make_unique<BridgePool>(loop.get(), testConfig(relay.port(), 1, false),
                                           [&](const ot::client::PoolStatus&) { ++reports; });
  pool->start();
  REQUIRE(loop.runUntil([&] { return relay.attachedCount() == 1; }));
  const int before = reports;
  pool.reset();
  REQUIRE(loop.runUntil([&] { return relay.bridge(0).tcpClosed; }));
  CHECK(relay.bridge(0).closeCodes == std::vector<uint16_t>{1001});
  relay.close();
  REQUIRE(loop.runUntil([&] { return loop.handleCount() == 0; }));
  CHECK(reports == before);  // no status after the pool is gone
}

TEST_CASE("client pool: status reports are coalesced off the call stack and can stop the pool") {
  TestLoop loop;
  FakeRelay relay(loop, relayOptions([](FakeRelayOptions& o) { o.attachError = "bad_token"; }));
  std::unique_ptr<BridgePool> pool;
  bool done = false;
  pool = std::make_unique<BridgePool>(loop.get(), testConfig(relay.port(), 1, false),
                                      [&](const ot::client::PoolStatus& status) {
                                        // What main does on a fatal status: stop, then exit.
                                        if (status.fatal) pool->stop([&] { done = true; });
                                      });
  pool->start();
  REQUIRE(loop.runUntil([&] { return done; }));
  pool.reset();
  relay.close();
  REQUIRE(loop.runUntil([&] { return loop.handleCount() == 0; }));
}

TEST_CASE("client pool: without a certificate visitors are refused; updateCertificate fixes it") {
  TestLoop loop;
  LocalServer echo(loop.get(), LocalServer::Mode::kEcho);
  FakeRelay relay(loop);
  BridgeConfig config = testConfig(relay.port(), echo.port(), true);
  config.certificateChainPem.clear();
  config.privateKeyPem.clear();
  PoolUnderTest pool(loop, config);
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 1; }));
  FakeBridge& bridge = relay.bridge(0);
  bridge.sendOpen(1);
  REQUIRE(loop.runUntil([&] { return bridge.conns[1].reset; }));
  CHECK(bridge.conns[1].resetReason == 5);
  CHECK(bridge.conns[1].resetText.find("certificate") != std::string::npos);

  pool->updateCertificate(pki().tunnelChain(), pki().tunnel.keyPem);
  bridge.sendOpen(2);
  auto context = ot::tls::makeClientContext(pki().caFile.string(), {"http/1.1"});
  REQUIRE(context.ok());
  auto visitor = ot::tls::TlsEngine::client(context.value(), kTunnelName, true);
  (void)visitor->handshake();
  auto out = visitor->takeOutput();
  bridge.queueData(2, {reinterpret_cast<const char*>(out.data()), out.size()});
  size_t consumed = 0;
  REQUIRE(loop.runUntil([&] {
    const std::string& data = bridge.conns[2].data;
    if (data.size() > consumed) {
      visitor->feed(
          {reinterpret_cast<const uint8_t*>(data.data()) + consumed, data.size() - consumed});
      consumed = data.size();
      (void)visitor->handshake();
      if (visitor->pendingOutputSize() > 0) {
        auto more = visitor->takeOutput();
        bridge.queueData(2, {reinterpret_cast<const char*>(more.data()), more.size()});
      }
    }
    return visitor->handshakeDone();
  }));
  CHECK_FALSE(bridge.conns[2].reset);

  // A bad renewal keeps the working certificate.
  pool->updateCertificate("not a certificate", "not a key");
  bridge.sendOpen(3);
  bridge.sendData(3, "\x16\x03\x01");
  loop.runFor(50);
  CHECK_FALSE(bridge.conns[3].reset);
}
