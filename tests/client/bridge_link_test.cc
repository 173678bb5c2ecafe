// The bridge's life against a fake relay: upgrade and attach as docs/protocol.md sections 1-4
// say, the stop-for-good answers of section 10, reconnecting, liveness and drain.
#include <doctest/doctest.h>

#include <string>

#include "client/backoff.h"
#include "client/bridge_pool.h"
#include "client/status_line.h"
#include "common/bridge_control.h"
#include "tests/client/fake_relay.h"
#include "tests/client/test_support.h"

using namespace ot::client_test;
using ot::client::BridgeConfig;

TEST_CASE("client bridge: upgrades to /api/tunnel/<id>/bridge and attaches with its settings") {
  TestLoop loop;
  FakeRelay relay(loop);
  BridgeConfig config = testConfig(relay.port(), 1, false);
  config.routes["api"] = {"127.0.0.1", 1};
  config.origin = "laptop";
  config.profile = "tls443";
  config.maxConns = 64;
  PoolUnderTest pool(loop, config);
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 1; }));

  REQUIRE(relay.bridges.size() == 1);
  FakeBridge& bridge = relay.bridge(0);
  CHECK(bridge.method == "GET");
  CHECK(bridge.path == "/api/tunnel/t1/bridge");
  CHECK(bridge.host == "relay.localhost");
  CHECK(bridge.userAgent == "otunnel/0.1.0");
  CHECK(bridge.attach["type"] == "attach");
  CHECK(bridge.attach["token"] == "tk_test_token");
  CHECK(bridge.attach["routes"] == nlohmann::json::array({"", "api"}));
  CHECK(bridge.attach["max_conns"] == 64);
  CHECK(bridge.attach["window"] == 65536);
  CHECK(bridge.attach["origin"] == "laptop");
  CHECK(bridge.attach["profile"] == "tls443");
  CHECK(pool.last.links == 1);
  CHECK_FALSE(pool.last.fatal);
  CHECK(pool->status().attached == 1);

  pool.stop();
  // The client went away: close 1001, answered by the relay.
  REQUIRE(bridge.closeCodes.size() == 1);
  CHECK(bridge.closeCodes[0] == 1001);
  CHECK(bridge.badFrames.empty());
}

TEST_CASE("client bridge: every link is its own bridge") {
  TestLoop loop;
  FakeRelay relay(loop);
  BridgeConfig config = testConfig(relay.port(), 1, false);
  config.links = 3;
  PoolUnderTest pool(loop, config);
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 3; }));
  CHECK(relay.bridges.size() == 3);
  CHECK(relay.attachedCount() == 3);
  pool.stop();
  for (auto& bridge : relay.bridges) CHECK(bridge->closeCodes == std::vector<uint16_t>{1001});
}

TEST_CASE("client bridge: a link waiting for its staggered first dial is not reconnecting") {
  TestLoop loop;
  FakeRelay relay(loop);
  BridgeConfig config = testConfig(relay.port(), 1, false);
  config.links = 2;
  // The second link dials 2 s after the first: long enough that the first attaches before it
  // on a loaded box under the sanitizers (with 200 ms, CI once saw both attached first).
  config.startDelaysMs = {0, 2'000};
  PoolUnderTest pool(loop, config);
  pool->start();
  // Before the second link's first dial: one attached, nothing failed, no retry to announce
  // (the status line would otherwise print "reconnecting in 2.0 s: the bridge ended").
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 1; }));
  CHECK(relay.bridges.size() == 1);
  CHECK(pool->status().nextRetryMs == 0);
  CHECK(pool->status().lastError.empty());
  CHECK(ot::client::statusLine(pool->status()).value() == "otunnel: connected (1/2 links)");
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 2; }));
  pool.stop();
}

TEST_CASE("client bridge: attach_error bad_token stops the link for good") {
  TestLoop loop;
  FakeRelay relay(loop, relayOptions([](FakeRelayOptions& o) { o.attachError = "bad_token"; }));
  PoolUnderTest pool(loop, testConfig(relay.port(), 1, false));
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.fatal; }));
  CHECK(pool.last.attached == 0);
  CHECK(pool.last.lastError.find("bad_token") != std::string::npos);
  CHECK(pool.last.nextRetryMs == 0);
  loop.runFor(600);  // longer than the first two backoff waits together
  CHECK(relay.bridges.size() == 1);
}

TEST_CASE("client bridge: attach_error cert_not_ready is retried") {
  TestLoop loop;
  FakeRelay relay(loop,
                  relayOptions([](FakeRelayOptions& o) { o.attachError = "cert_not_ready"; }));
  PoolUnderTest pool(loop, testConfig(relay.port(), 1, false));
  pool->start();
  REQUIRE(loop.runUntil([&] { return relay.bridges.size() >= 2; }));
  CHECK_FALSE(pool.last.fatal);
  CHECK(pool->status().lastError.find("cert_not_ready") != std::string::npos);
}

TEST_CASE("client bridge: 404 on the upgrade is fatal") {
  TestLoop loop;
  FakeRelay relay(loop, relayOptions([](FakeRelayOptions& o) {
                    o.upgradeStatus = 404;
                    o.errorTag = "NotFoundError";
                  }));
  PoolUnderTest pool(loop, testConfig(relay.port(), 1, false));
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.fatal; }));
  CHECK(pool.last.lastError.find("404") != std::string::npos);
  CHECK(pool.last.lastError.find("NotFoundError") != std::string::npos);
  loop.runFor(600);
  CHECK(relay.bridges.size() == 1);
}

TEST_CASE("client bridge: 503 on the upgrade is retried with backoff") {
  TestLoop loop;
  FakeRelay relay(loop, relayOptions([](FakeRelayOptions& o) {
                    o.upgradeStatus = 503;
                    o.errorTag = "ServiceUnavailableError";
                  }));
  PoolUnderTest pool(loop, testConfig(relay.port(), 1, false));
  pool->start();
  REQUIRE(loop.runUntil([&] { return relay.bridges.size() >= 3; }));
  CHECK_FALSE(pool.last.fatal);
  CHECK(pool->status().lastError.find("503") != std::string::npos);
}

TEST_CASE("client bridge: a refused TCP connection is retried, not fatal") {
  TestLoop loop;
  const uint16_t port = unusedPort(loop.get());
  PoolUnderTest pool(loop, testConfig(port, 1, false));
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.nextRetryMs > 0; }));
  CHECK_FALSE(pool.last.fatal);
  CHECK(pool.last.lastError.find("connection refused") != std::string::npos);
  // Nothing listens while a relay restarts: "busy", retried soon (client/backoff.h).
  CHECK(pool.last.lastError.find("(the relay is restarting or busy)") != std::string::npos);
}

TEST_CASE("client bridge: a relay certificate for another name is refused (retried)") {
  TestLoop loop;
  FakeRelay relay(loop);
  BridgeConfig config = testConfig(relay.port(), 1, false);
  config.domain = "other.localhost";  // the relay's certificate says relay.localhost
  PoolUnderTest pool(loop, config);
  pool->start();
  REQUIRE(loop.runUntil([&] { return !pool.last.lastError.empty(); }));
  CHECK(pool.last.lastError.find("tls") != std::string::npos);
  CHECK(pool.last.lastError.find("restarting or busy") == std::string::npos);  // broken
  CHECK(pool.last.attached == 0);
  CHECK_FALSE(pool.last.fatal);
  CHECK(relay.attachedCount() == 0);
}

TEST_CASE("client bridge: the relay closing after attached makes the link reconnect") {
  TestLoop loop;
  FakeRelay relay(loop, relayOptions([](FakeRelayOptions& o) { o.closeAfterAttached = true; }));
  PoolUnderTest pool(loop, testConfig(relay.port(), 1, false));
  pool->start();
  // Each attached bridge resets the backoff: 125-250 ms between attempts.
  const uint64_t started = loop.now();
  REQUIRE(loop.runUntil([&] { return relay.attachedCount() >= 4; }));
  CHECK(loop.now() - started < 3000);
  CHECK_FALSE(pool.last.fatal);
  for (size_t i = 0; i + 1 < relay.bridges.size(); ++i) {
    CHECK(relay.bridge(i).closeCodes == std::vector<uint16_t>{1000});  // our echo of its close
  }
}

TEST_CASE("client bridge: a reset close (4000) redials within a few ms, skipping the backoff") {
  TestLoop loop;
  FakeRelay relay(loop);
  PoolUnderTest pool(loop, testConfig(relay.port(), 1, false));
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 1; }));
  // Several resets in a row: none counts as a failure, so none waits longer than the spread
  // (an ordinary close waits 125-250 ms, and longer when the attempts after it fail).
  for (size_t round = 1; round <= 3; ++round) {
    const size_t before = relay.bridges.size();
    relay.latest().sendClose(ot::bridge::kCloseReset);
    // Either the wait is seen (it is the reset's, a few ms) or the redial already happened.
    REQUIRE(loop.runUntil([&] {
      const auto status = pool->status();
      return (status.attached == 0 && status.nextRetryMs != 0) || relay.bridges.size() > before;
    }));
    if (relay.bridges.size() == before) {
      CHECK(pool->status().nextRetryMs <= ot::client::Backoff::kResetSpreadMs);
    }
    REQUIRE(loop.runUntil(
        [&] { return relay.attachedCount() == round + 1 && pool.last.attached == 1; }));
    CHECK(relay.bridges.size() == before + 1);
    CHECK(relay.bridge(round - 1).closeCodes == std::vector<uint16_t>{4000});  // our echo
  }
  CHECK_FALSE(pool.last.fatal);
}

TEST_CASE("client bridge: pings are answered at once with the same payload") {
  TestLoop loop;
  FakeRelay relay(loop);
  PoolUnderTest pool(loop, testConfig(relay.port(), 1, false));
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 1; }));
  relay.latest().sendPing("are you there");
  REQUIRE(loop.runUntil([&] { return !relay.latest().pongs.empty(); }));
  CHECK(relay.latest().pongs == std::vector<std::string>{"are you there"});
}

TEST_CASE("client bridge: a text held for the next pong rides in the pong's TLS record") {
  TestLoop loop;
  FakeRelay relay(loop);
  PoolUnderTest pool(loop, testConfig(relay.port(), 1, false));
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 1; }));
  REQUIRE(pool->sendToAttached("first", ot::client::TextTiming::kWithNextPong) == 1);
  // A newer one replaces it; nothing goes out before the relay's ping.
  REQUIRE(pool->sendToAttached("second", ot::client::TextTiming::kWithNextPong) == 1);
  loop.runFor(200);
  CHECK(relay.latest().texts.empty());
  const uint64_t records = relay.latest().recordsFromClient;
  relay.latest().sendPing("p");
  REQUIRE(loop.runUntil([&] { return !relay.latest().texts.empty(); }));
  CHECK(relay.latest().pongs == std::vector<std::string>{"p"});
  CHECK(relay.latest().texts == std::vector<std::string>{"second"});
  CHECK(relay.latest().recordsFromClient == records + 1);  // both in one record
  // The next pong goes alone; a text sent now goes at once, alone.
  relay.latest().sendPing("q");
  REQUIRE(loop.runUntil([&] { return relay.latest().pongs.size() == 2; }));
  REQUIRE(pool->sendToAttached("now", ot::client::TextTiming::kNow) == 1);
  REQUIRE(loop.runUntil([&] { return relay.latest().texts.size() == 2; }));
  CHECK(relay.latest().texts.back() == "now");
}

TEST_CASE("client bridge: a held text goes alone when no ping comes within a heartbeat") {
  TestLoop loop;
  FakeRelay relay(loop, relayOptions([](FakeRelayOptions& o) { o.heartbeatMs = 1000; }));
  PoolUnderTest pool(loop, testConfig(relay.port(), 1, false));
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 1; }));
  const uint64_t heldAt = loop.now();
  REQUIRE(pool->sendToAttached("report", ot::client::TextTiming::kWithNextPong) == 1);
  REQUIRE(loop.runUntil([&] { return !relay.latest().texts.empty(); }, 3000));
  CHECK(loop.now() - heldAt >= 1000);
  CHECK(relay.latest().texts == std::vector<std::string>{"report"});
  CHECK(relay.latest().pongs.empty());
}

TEST_CASE("client bridge: a silent relay is pinged, then abandoned with 1001") {
  TestLoop loop;
  FakeRelay relay(loop, relayOptions([](FakeRelayOptions& o) {
                    o.heartbeatMs = 1000;
                    o.answerPings = false;
                  }));
  PoolUnderTest pool(loop, testConfig(relay.port(), 1, false));
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 1; }));
  const uint64_t attachedAt = loop.now();
  REQUIRE(loop.runUntil([&] { return !relay.bridge(0).pings.empty(); }, 3000));
  // A heartbeat and a half of silence (section 8): a relay that pings after one heartbeat always
  // comes first.
  CHECK(loop.now() - attachedAt >= 1400);
  // Three heartbeats without a byte from the relay: close 1001 and a new bridge.
  REQUIRE(loop.runUntil([&] { return !relay.bridge(0).closeCodes.empty(); }, 5000));
  CHECK(relay.bridge(0).closeCodes[0] == 1001);
  CHECK(loop.now() - attachedAt >= 2900);
  CHECK(relay.bridge(0).pings.size() == 2);  // at 1.5 and 2.5 heartbeats
  REQUIRE(loop.runUntil([&] { return relay.attachedCount() == 2; }, 3000));
}

TEST_CASE("client bridge: drain starts a replacement and keeps the old bridge until it closes") {
  TestLoop loop;
  FakeRelay relay(loop);
  PoolUnderTest pool(loop, testConfig(relay.port(), 1, false));
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 1; }));
  relay.bridge(0).sendText(R"({"type":"drain"})");
  REQUIRE(loop.runUntil([&] { return relay.attachedCount() == 2; }));
  CHECK_FALSE(relay.bridge(0).tcpClosed);  // the draining bridge stays
  CHECK(relay.bridge(0).closeCodes.empty());
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 1; }));
  relay.bridge(0).sendClose(1012);
  REQUIRE(loop.runUntil([&] { return relay.bridge(0).tcpClosed; }));
  loop.runFor(400);
  CHECK(relay.bridges.size() == 2);  // closing the drained bridge needs no replacement
  CHECK(pool->status().attached == 1);
}

TEST_CASE(
    "client bridge: unknown text is ignored once attached; a frame for an unused id is 1002") {
  TestLoop loop;
  FakeRelay relay(loop);
  PoolUnderTest pool(loop, testConfig(relay.port(), 1, false));
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.attached == 1; }));
  // After attached, an unknown text message is ignored...
  relay.bridge(0).sendText(R"({"type":"something_new"})");
  relay.bridge(0).sendPing("x");
  REQUIRE(loop.runUntil([&] { return !relay.bridge(0).pongs.empty(); }));
  CHECK(relay.bridge(0).closeCodes.empty());
  // ...but a frame for a connection never opened closes the bridge.
  relay.bridge(0).sendEnd(7);
  REQUIRE(loop.runUntil([&] { return !relay.bridge(0).closeCodes.empty(); }));
  CHECK(relay.bridge(0).closeCodes[0] == 1002);
  REQUIRE(loop.runUntil([&] { return relay.attachedCount() == 2; }));
}
