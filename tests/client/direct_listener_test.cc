// Direct mode, the origin's side: a listening profile accepts the relay's connections (the fake
// relay DIALS otunnel here) and runs the usual bridge over each: TLS client with the relay's
// certificate verified, upgrade, attach with the origin, profile name and index. Real sockets on
// 127.0.27.x (this helper's loopback range).
#include "client/direct_listener.h"

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "client/dialer.h"
#include "client/dialer_status.h"
#include "client/status_report.h"
#include "tests/client/fake_relay.h"
#include "tests/client/test_support.h"

using namespace ot::client_test;
using ot::client::DialerStatus;
using ot::client::DirectListener;
using ot::client::DirectListenerOptions;
using ot::client::ProfileSpec;

namespace {

constexpr const char* kListenIp = "127.0.27.1";

// A port on kListenIp where nothing listens (bound, then released), for a profile's fixed port.
uint16_t freePort(uv_loop_t* loop) {
  return unusedPort(loop, kListenIp);
}

BridgeConfig directConfig(uint16_t localPort) {
  BridgeConfig config = testConfig(0, localPort, false);
  config.origin = "web-1";
  config.profile = "direct";
  config.profileIndex = 0;
  config.links = 4;
  return config;
}

DirectListenerOptions listenOn(uint16_t port = 0) {
  DirectListenerOptions options;
  options.host = kListenIp;
  options.port = port;
  return options;
}

// The listener under test, stopped (and checked stopped) at the end.
struct ListenerUnderTest {
  ListenerUnderTest(TestLoop& l, BridgeConfig config, DirectListenerOptions options)
      : loop(l),
        listener(std::make_unique<DirectListener>(l.get(), std::move(config), std::move(options),
                                                  [this] {
                                                    ++reports;
                                                    last = listener->status();
                                                  })) {
    listener->start();
    REQUIRE(listener->boundPort() != 0);
  }
  ~ListenerUnderTest() {
    bool done = false;
    listener->stop([&done] { done = true; });
    CHECK(loop.runUntil([&] { return done; }, 8'000));
    listener.reset();
  }
  ListenerUnderTest(const ListenerUnderTest&) = delete;
  ListenerUnderTest& operator=(const ListenerUnderTest&) = delete;

  DirectListener* operator->() { return listener.get(); }
  uint16_t port() { return listener->boundPort(); }

  TestLoop& loop;
  std::unique_ptr<DirectListener> listener;
  int reports = 0;
  PoolStatus last;
};

ProfileSpec dialProfile(std::string name, uint16_t port, int links) {
  ProfileSpec spec;
  spec.name = std::move(name);
  spec.host = kRelayName;
  spec.port = port;
  spec.links = links;
  return spec;
}

ProfileSpec listenProfile(std::string name, uint16_t port, int links) {
  ProfileSpec spec;
  spec.name = std::move(name);
  spec.host = kListenIp;
  spec.port = port;
  spec.links = links;
  spec.listen = true;
  return spec;
}

}  // namespace

TEST_CASE(
    "client direct: a listening profile attaches over the relay's connections next to a dialing "
    "one, carries a visitor stream and counts its links in every status") {
  TestLoop loop;
  LocalServer echo(loop.get(), LocalServer::Mode::kEcho);
  FakeRelay relay(loop, relayOptions([](FakeRelayOptions& o) { o.protocol = 2; }));
  BridgeConfig base = testConfig(relay.port(), echo.port(), false);
  base.origin = "web-1";
  base.credential = "oc_derived";
  const uint16_t listenPort = freePort(loop.get());
  ot::client::Dialer dialer(
      loop.get(), base,
      {dialProfile("dialed", relay.port(), 1), listenProfile("direct", listenPort, 3)}, 4, nullptr);
  dialer.start();
  REQUIRE(loop.runUntil([&] { return relay.attachedCount() == 1; }));
  FakeBridge& first = relay.dial(kListenIp, listenPort);
  FakeBridge& second = relay.dial(kListenIp, listenPort);
  REQUIRE(loop.runUntil([&] { return relay.attachedCount() == 3; }));
  for (FakeBridge* bridge : {&first, &second}) {
    CHECK(bridge->connected);
    CHECK(bridge->path == "/api/tunnel/t1/bridge");
    CHECK(bridge->host == kRelayName);
    CHECK(bridge->attach.value("origin", "") == "web-1");
    CHECK(bridge->attach.value("profile", "") == "direct");
    CHECK(bridge->attach.value("profile_index", 0) == 1);
    CHECK(bridge->attach.value("token", "") == "oc_derived");
  }

  // A visitor over the accepted bridge reaches the local service and back.
  second.sendOpen(7);
  second.sendData(7, "hello over a direct link");
  second.sendEnd(7);
  REQUIRE(loop.runUntil([&] { return second.conns[7].ended; }));
  CHECK(second.conns[7].data == "hello over a direct link");

  const PoolStatus sum = dialer.status();
  CHECK(sum.links == 1 + 3);
  CHECK(sum.attached == 3);
  const DialerStatus detailed = dialer.detailedStatus();
  REQUIRE(detailed.profiles.size() == 2);
  const auto& direct = detailed.profiles[1];
  CHECK(direct.listen);
  CHECK(direct.index == 1);
  REQUIRE(direct.addresses.size() == 1);
  CHECK(direct.addresses[0].address == std::string("listen ") + kListenIp);
  CHECK(direct.addresses[0].wanted == 3);
  CHECK(direct.addresses[0].attached == 2);
  // The status file and `otunnel status` read it back; the report to the relay carries it.
  const std::string json = ot::client::statusToJson(detailed, 1'000, 42);
  auto parsed = ot::client::parseStatusJson(json);
  REQUIRE(parsed.ok());
  CHECK(parsed.value().status == detailed);
  const std::string table = ot::client::renderStatusTable(parsed.value(), 1'000);
  CHECK(table.find("1:direct") != std::string::npos);
  CHECK(table.find("listen 127.0.27.1 port " + std::to_string(listenPort)) != std::string::npos);
  CHECK(table.find("2/3") != std::string::npos);
  const auto report = ot::client::statusReportOf(detailed);
  REQUIRE(report.profiles.size() == 2);
  CHECK(report.profiles[1].name == "direct");
  CHECK(report.profiles[1].linksWanted == 3);
  CHECK(report.profiles[1].linksUp == 2);

  // An accepted link that ends is not redialed by otunnel: the count just goes down.
  const size_t bridgesBefore = relay.bridges.size();
  first.dropTcp();
  REQUIRE(loop.runUntil([&] { return dialer.status().attached == 2; }));
  loop.runFor(300);
  CHECK(relay.bridges.size() == bridgesBefore);

  bool done = false;
  dialer.stop([&done] { done = true; });
  REQUIRE(loop.runUntil([&] { return done; }, 8'000));
  relay.close();
  echo.close();
  REQUIRE(loop.runUntil([&] { return loop.handleCount() == 0; }));
}

TEST_CASE("client direct: an accepted connection that never finishes its handshake is dropped") {
  TestLoop loop;
  FakeRelay relay(loop, relayOptions([](FakeRelayOptions& o) { o.silent = true; }));
  BridgeConfig config = directConfig(1);
  config.attachDeadlineMs = 300;
  {
    ListenerUnderTest listener(loop, config, listenOn());
    FakeBridge& silent = relay.dial(kListenIp, listener.port());
    REQUIRE(loop.runUntil([&] { return silent.connected; }));
    // otunnel speaks first (its ClientHello), then gives up at the deadline.
    REQUIRE(loop.runUntil([&] { return silent.tcpClosed; }, 5'000));
    CHECK(silent.bytesFromClient > 0);
    CHECK(silent.attach.is_null());
    CHECK(listener->status().attached == 0);
    CHECK_FALSE(listener->status().lastError.empty());
    CHECK_FALSE(listener->status().fatal);
  }
  relay.close();
  REQUIRE(loop.runUntil([&] { return loop.handleCount() == 0; }));
}

TEST_CASE("client direct: connections over the cap of 64 are closed at accept and counted") {
  TestLoop loop;
  FakeRelay relay(loop, relayOptions([](FakeRelayOptions& o) { o.silent = true; }));
  {
    ListenerUnderTest listener(loop, directConfig(1), listenOn());
    CHECK(ot::client::kMaxAcceptedLinks == 64);
    for (size_t i = 0; i < ot::client::kMaxAcceptedLinks + 1; ++i) {
      (void)relay.dial(kListenIp, listener.port());
    }
    REQUIRE(loop.runUntil([&] {
      size_t spoken = 0;
      size_t closed = 0;
      for (const auto& bridge : relay.bridges) {
        spoken += bridge->bytesFromClient > 0 ? 1U : 0U;
        closed += bridge->tcpClosed ? 1U : 0U;
      }
      return listener->refused() == 1 && spoken == 64 && closed == 1;
    }));
    loop.runFor(200);  // and no other goes meanwhile
    size_t closed = 0;
    for (const auto& bridge : relay.bridges) closed += bridge->tcpClosed ? 1U : 0U;
    CHECK(closed == 1);
    CHECK(listener->status().attached == 0);
    const auto refusedOne = std::find_if(relay.bridges.begin(), relay.bridges.end(),
                                         [](const auto& bridge) { return bridge->tcpClosed; });
    REQUIRE(refusedOne != relay.bridges.end());
    CHECK((*refusedOne)->bytesFromClient == 0);  // not even a ClientHello
  }
  relay.close();
  REQUIRE(loop.runUntil([&] { return loop.handleCount() == 0; }));
}

TEST_CASE("client direct: the no-relay text names the address, the wait and the API call") {
  CHECK(ot::client::noRelayText("0.0.0.0", 7443, 30'000, false, "k3x9q2", "web-1") ==
        "no relay has connected to 0.0.0.0:7443 in 30 s: is the origin's direct address set (PUT "
        "/api/tunnel/k3x9q2/origins/web-1/direct) and reachable from the relay?");
  CHECK(ot::client::noRelayText("::", 7443, 30'000, true, "k3x9q2", "web-1")
            .starts_with("no relay link on [::]:7443 for 30 s: is the origin's direct address"));
}

TEST_CASE("client direct: with no relay link for the wait, the status says what to check") {
  TestLoop loop;
  FakeRelay relay(loop);
  DirectListenerOptions options = listenOn();
  options.quietMs = 200;
  {
    ListenerUnderTest listener(loop, directConfig(1), options);
    CHECK(listener->status().lastError.empty());
    // Reported by the listener on its own, without anyone asking.
    REQUIRE(loop.runUntil([&] { return !listener.last.lastError.empty(); }, 5'000));
    const std::string where = std::string(kListenIp) + ":" + std::to_string(listener.port());
    CHECK(listener.last.lastError ==
          "no relay has connected to " + where +
              " in 0.2 s: is the origin's direct address set (PUT "
              "/api/tunnel/t1/origins/web-1/direct) and reachable from the relay?");

    FakeBridge& bridge = relay.dial(kListenIp, listener.port());
    REQUIRE(loop.runUntil([&] { return listener->status().attached == 1; }));
    CHECK(listener->status().lastError.empty());
    bridge.dropTcp();
    REQUIRE(loop.runUntil([&] {
      return listener->status().lastError.starts_with("no relay link on " + where + " for 0.2 s");
    }));
  }
  relay.close();
  REQUIRE(loop.runUntil([&] { return loop.handleCount() == 0; }));
}

TEST_CASE("client direct: a relay with a wrong certificate is refused before anything is sent") {
  TestLoop loop;
  FakeRelay relay(loop, relayOptions([](FakeRelayOptions& o) { o.untrustedCertificate = true; }));
  {
    ListenerUnderTest listener(loop, directConfig(1), listenOn());
    FakeBridge& wrong = relay.dial(kListenIp, listener.port());
    REQUIRE(loop.runUntil([&] { return wrong.tcpClosed; }));
    CHECK(wrong.bytesFromClient > 0);  // the ClientHello
    CHECK(wrong.method.empty());       // no upgrade request ...
    CHECK(wrong.attach.is_null());     // ... and no attach, so no credential
    REQUIRE(loop.runUntil([&] { return !listener->status().lastError.empty(); }));
    CHECK(listener->status().lastError.find("certificate") != std::string::npos);
    CHECK_FALSE(listener->status().fatal);  // a stranger cannot stop otunnel
    CHECK(listener->status().attached == 0);
  }
  relay.close();
  REQUIRE(loop.runUntil([&] { return loop.handleCount() == 0; }));
}

TEST_CASE("client direct: a port that cannot be bound stops the profile with a clear error") {
  TestLoop loop;
  FakeRelay relay(loop);
  {
    ListenerUnderTest holder(loop, directConfig(1), listenOn());
    auto listener = std::make_unique<DirectListener>(loop.get(), directConfig(1),
                                                     listenOn(holder.port()), nullptr);
    listener->start();
    const PoolStatus status = listener->status();
    CHECK(status.fatal);
    CHECK(status.lastError.find("cannot listen for the relay on 127.0.27.1:" +
                                std::to_string(holder.port())) != std::string::npos);
    bool done = false;
    listener->stop([&done] { done = true; });
    REQUIRE(loop.runUntil([&] { return done; }));
  }
  relay.close();
  REQUIRE(loop.runUntil([&] { return loop.handleCount() == 0; }));
}
