// Warm failover against a fake relay: two profiles, one reaching the relay and one a port nothing
// listens on; the version rule of a credential through the real bridge code.
#include "client/dialer.h"

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "client/bridge_pool.h"
#include "tests/client/fake_relay.h"
#include "tests/client/test_support.h"

using namespace ot::client_test;
using ot::client::BridgeConfig;
using ot::client::BridgePool;
using ot::client::Dialer;
using ot::client::PoolStatus;
using ot::client::ProfileSpec;

namespace {

ProfileSpec profile(std::string name, std::string host, uint16_t port, int links) {
  ProfileSpec spec;
  spec.name = std::move(name);
  spec.host = std::move(host);
  spec.port = port;
  spec.links = links;
  return spec;
}

void stopDialer(TestLoop& loop, Dialer& dialer) {
  bool done = false;
  dialer.stop([&done] { done = true; });
  CHECK(loop.runUntil([&] { return done; }, 8'000));
}

}  // namespace

TEST_CASE("client dialer: a good profile attaches its links while an unreachable one backs off") {
  TestLoop loop;
  FakeRelay relay(loop);
  const uint16_t dead = unusedPort(loop.get());
  BridgeConfig base = testConfig(relay.port(), 1, false);
  base.origin = "web-1";
  PoolStatus last;
  Dialer dialer(
      loop.get(), base,
      {profile("good", kRelayName, relay.port(), 3), profile("bad", "127.0.0.1", dead, 2)}, 4,
      [&](const PoolStatus& status) { last = status; });
  dialer.start();
  REQUIRE(loop.runUntil([&] { return relay.attachedCount() == 3; }));
  REQUIRE(loop.runUntil([&] {
    const auto status = dialer.detailedStatus();
    return status.profiles.size() == 2 && status.profiles[0].addresses.size() == 1 &&
           status.profiles[0].addresses[0].attached == 3 &&
           status.profiles[1].addresses.size() == 1 &&
           status.profiles[1].addresses[0].nextTryMs > 0 &&
           !status.profiles[1].addresses[0].lastError.empty();
  }));
  const auto status = dialer.detailedStatus();
  CHECK(status.origin == "web-1");
  REQUIRE(status.profiles[0].addresses.size() == 1);
  CHECK(status.profiles[0].addresses[0].address == "127.0.0.1");
  CHECK(status.profiles[0].addresses[0].wanted == 3);
  CHECK(status.profiles[0].addresses[0].attached == 3);
  CHECK(status.profiles[1].index == 1);
  CHECK(status.profiles[1].addresses[0].wanted == 2);
  CHECK(status.profiles[1].addresses[0].attached == 0);
  CHECK(status.profiles[1].addresses[0].lastError.find("refused") != std::string::npos);
  const PoolStatus sum = dialer.status();
  CHECK(sum.links == 5);
  CHECK(sum.attached == 3);
  CHECK_FALSE(sum.fatal);
  for (size_t i = 0; i < 3; ++i) {
    const auto& attach = relay.bridge(i).attach;
    CHECK(attach.value("origin", "") == "web-1");
    CHECK(attach.value("profile", "") == "good");
    CHECK(attach.value("profile_index", 0) == 0);
    CHECK(attach.value("token", "") == "tk_test_token");
  }
  stopDialer(loop, dialer);
  relay.close();
  REQUIRE(loop.runUntil([&] { return loop.handleCount() == 0; }));
}

TEST_CASE(
    "client dialer: a second profile attaches with its index; the credential replaces the "
    "token") {
  TestLoop loop;
  FakeRelay relay(loop, relayOptions([](FakeRelayOptions& o) { o.protocol = 2; }));
  BridgeConfig base = testConfig(relay.port(), 1, false);
  base.origin = "web-2";
  base.credential = "oc_derived";
  Dialer dialer(
      loop.get(), base,
      {profile("a", kRelayName, relay.port(), 1), profile("b", kRelayName, relay.port(), 1)}, 4,
      nullptr);
  dialer.start();
  REQUIRE(loop.runUntil([&] { return dialer.status().attached == 2; }));
  int second = 0;
  for (size_t i = 0; i < 2; ++i) {
    const auto& attach = relay.bridge(i).attach;
    CHECK(attach.value("token", "") == "oc_derived");
    if (attach.value("profile", "") == "b") {
      CHECK(attach.value("profile_index", 0) == 1);
      ++second;
    }
  }
  CHECK(second == 1);
  CHECK(dialer.detailedStatus().credential);
  stopDialer(loop, dialer);
  relay.close();
  REQUIRE(loop.runUntil([&] { return loop.handleCount() == 0; }));
}

TEST_CASE("client dialer: with a credential, a protocol 1 relay is refused for good") {
  TestLoop loop;
  FakeRelay relay(loop);  // sends attached without "protocol"
  BridgeConfig config = testConfig(relay.port(), 1, false);
  config.credential = "oc_derived";
  config.origin = "web-1";
  PoolUnderTest pool(loop, config);
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.fatal; }));
  CHECK(pool.last.lastError ==
        "this relay speaks bridge protocol 1 and does not know origins; upgrade it or use the "
        "tunnel token");
  CHECK(pool.last.attached == 0);
  pool.stop();

  // Without a credential the same relay is fine.
  BridgeConfig plain = testConfig(relay.port(), 1, false);
  PoolUnderTest tokenPool(loop, plain);
  tokenPool->start();
  REQUIRE(loop.runUntil([&] { return tokenPool.last.attached == 1; }));
  CHECK_FALSE(tokenPool.last.fatal);
  tokenPool.stop();
  relay.close();
  REQUIRE(loop.runUntil([&] { return loop.handleCount() == 0; }));
}

TEST_CASE("client dialer: bad_token with a credential says the origin was removed or rotated") {
  TestLoop loop;
  FakeRelay relay(loop, relayOptions([](FakeRelayOptions& o) { o.attachError = "bad_token"; }));
  BridgeConfig config = testConfig(relay.port(), 1, false);
  config.credential = "oc_old";
  PoolUnderTest pool(loop, config);
  pool->start();
  REQUIRE(loop.runUntil([&] { return pool.last.fatal; }));
  CHECK(pool.last.lastError.find("origin was removed") != std::string::npos);
  pool.stop();
  relay.close();
  REQUIRE(loop.runUntil([&] { return loop.handleCount() == 0; }));
}

TEST_CASE("client dialer: destroyed without stop(), it closes its handles in the background") {
  TestLoop loop;
  FakeRelay relay(loop);
  auto dialer = std::make_unique<Dialer>(
      loop.get(), testConfig(relay.port(), 1, false),
      std::vector<ProfileSpec>{profile("a", kRelayName, relay.port(), 2)}, 4, nullptr);
  dialer->start();
  REQUIRE(loop.runUntil([&] { return dialer->status().attached == 2; }));
  dialer.reset();
  REQUIRE(loop.runUntil([&] { return relay.bridge(0).tcpClosed && relay.bridge(1).tcpClosed; }));
  relay.close();
  REQUIRE(loop.runUntil([&] { return loop.handleCount() == 0; }));
}
