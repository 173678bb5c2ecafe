// DirectDialer (relayd/direct_dialer.h) with real sockets on 127.0.26.x: a record's direct origin
// is dialed `links` times; a link that ends is redialed; a refusing address backs off (counted by
// the dialer's counters while the manual clock moves, not by sleeping); a record without the
// address closes the links and stops dialing; private addresses need DIRECT_ALLOW_PRIVATE. The
// inbound path is the test's (Hooks::handOff): it plays the part of the relay's attach.
#include "relayd/direct_dialer.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/relayd/manual_relay_loop.h"

using ot::relayd::DialFailure;
using ot::relayd::DirectDialer;

namespace {

constexpr const char* kHost = "127.0.26.1";

// A listening socket on 127.0.26.1 whose connections the test accepts by hand.
struct FakeOrigin {
  int fd = -1;
  uint16_t port = 0;
  std::vector<int> accepted;

  FakeOrigin() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    REQUIRE(::inet_pton(AF_INET, kHost, &address.sin_addr) == 1);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(fd, 64) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port = ntohs(address.sin_port);
  }
  ~FakeOrigin() {
    for (int client : accepted) ::close(client);
    if (fd >= 0) ::close(fd);
  }
  FakeOrigin(const FakeOrigin&) = delete;
  FakeOrigin& operator=(const FakeOrigin&) = delete;
  void acceptAll() {
    for (;;) {
      const int client = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) return;
      accepted.push_back(client);
    }
  }
  // Stops listening: connects to the port are refused from now on.
  void refuse() {
    ::close(fd);
    fd = -1;
  }
  [[nodiscard]] std::string address() const {
    return std::string(kHost) + ":" + std::to_string(port);
  }
};

// A connection the dialer handed to "the inbound path".
struct Link final : ot::TcpStream::Handler {
  ot::TcpStream* stream = nullptr;
  uint64_t dialId = 0;
  bool closed = false;
  void onRead(std::span<const uint8_t>) override {}
  void onEof() override {}
  void onStreamError(int) override {}
  void onWritten(size_t) override {}
  void onClosed() override {
    closed = true;
    stream = nullptr;
  }
};

ot::relayd::v1::TunnelRecord recordOf(uint64_t revision, const std::string& address,
                                      uint32_t links) {
  ot::relayd::v1::TunnelRecord record;
  record.set_tunnel_id("t1");
  record.set_revision(revision);
  auto* origin = record.add_origins();
  origin->set_name("alpha");
  origin->set_credential_sha256(std::string(32, 'a'));
  if (!address.empty()) {
    origin->set_direct_address(address);
    origin->set_direct_links(links);
  }
  return record;
}

struct DialerRig : ot::test::ManualRelayLoop {
  std::optional<DirectDialer> dialer;
  std::vector<std::unique_ptr<Link>> links;
  std::vector<uint64_t> closedBridges;

  explicit DialerRig(bool allowPrivate = true) {
    config.directAllowPrivate = allowPrivate;
    DirectDialer::Hooks hooks;
    hooks.handOff = [this](ot::TcpStream* stream, uint64_t dialId) {
      auto link = std::make_unique<Link>();
      link->stream = stream;
      link->dialId = dialId;
      stream->setHandler(link.get());
      links.push_back(std::move(link));
    };
    hooks.closeBridge = [this](uint64_t bridgeKey) { closedBridges.push_back(bridgeKey); };
    dialer.emplace(*context, std::move(hooks));
    dialer->start();
  }
  ~DialerRig() {
    dialer->close();
    for (auto& link : links)
      if (link->stream != nullptr) link->stream->close(true);
    for (int i = 0; i < 100; ++i) uv_run(&loop, UV_RUN_NOWAIT);
    dialer.reset();
  }
  DialerRig(const DialerRig&) = delete;
  DialerRig& operator=(const DialerRig&) = delete;

  // Runs the loop (real time, at most 5 s) until `done`; the origin accepts what arrives.
  bool runUntil(const std::function<bool()>& done, FakeOrigin* origin = nullptr) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      uv_run(&loop, UV_RUN_NOWAIT);
      if (origin != nullptr) origin->acceptAll();
      if (done()) return true;
      ::usleep(2'000);
    }
    return false;
  }
  // Moves the manual clock by `ms` in steps; after each the dialer looks at the time (as its
  // timer does) and the loop runs a little, so connects on loopback complete.
  void advance(uint64_t ms, uint64_t stepMs = 100, FakeOrigin* origin = nullptr) {
    for (uint64_t t = 0; t < ms; t += stepMs) {
      clock->advance(static_cast<int64_t>(stepMs));
      dialer->pump();
      for (int i = 0; i < 10; ++i) {
        uv_run(&loop, UV_RUN_NOWAIT);
        if (origin != nullptr) origin->acceptAll();
        ::usleep(1'000);
      }
    }
  }
  // Attaches every handed-off link not attached yet, as bridge keys 100, 101, ...
  void attachAll(std::vector<uint64_t>& keys) {
    for (auto& link : links) {
      if (link->closed || link->stream == nullptr) continue;
      bool known = false;
      for (uint64_t key : keys)
        if (key == 100 + link->dialId) known = true;
      if (known) continue;
      REQUIRE(dialer->dialAttached(link->dialId, 100 + link->dialId, "t1", "alpha"));
      keys.push_back(100 + link->dialId);
    }
  }
};

}  // namespace

TEST_CASE("direct dialer: dials the links, redials one that ended, closes them when removed") {
  FakeOrigin origin;
  DialerRig rig;
  rig.dialer->onRecord(recordOf(1, origin.address(), 3));
  REQUIRE(
      rig.runUntil([&] { return rig.links.size() == 3 && origin.accepted.size() == 3; }, &origin));
  CHECK(rig.dialer->counters().started == 3);
  for (auto& link : rig.links) CHECK(link->stream->peer().toString() == origin.address());
  std::vector<uint64_t> keys;
  rig.attachAll(keys);
  CHECK(rig.dialer->counters().up == 3);
  CHECK(rig.dialer->schedule("t1", "alpha")->up() == 3);
  // Nothing more is dialed while the links are up.
  rig.advance(2'000, 250, &origin);
  CHECK(rig.dialer->counters().started == 3);
  CHECK(origin.accepted.size() == 3);

  // One ends (the bridge's connection closed): redialed after a short wait.
  rig.links[1]->stream->close(false);
  rig.dialer->dialEnded(rig.links[1]->dialId);
  CHECK(rig.dialer->counters().up == 2);
  rig.advance(1'000, 250, &origin);
  REQUIRE(
      rig.runUntil([&] { return rig.links.size() == 4 && origin.accepted.size() == 4; }, &origin));
  CHECK(rig.dialer->counters().started == 4);
  rig.attachAll(keys);
  CHECK(rig.dialer->counters().up == 3);

  // A dialed connection attaching as another origin is not a link of the target.
  rig.dialer->onRecord(recordOf(2, origin.address(), 4));  // links changed: dialed anew
  CHECK(rig.closedBridges.size() == 3);
  CHECK(rig.dialer->counters().up == 0);
  REQUIRE(rig.runUntil([&] { return rig.links.size() == 8; }, &origin));
  CHECK_FALSE(rig.dialer->dialAttached(rig.links[4]->dialId, 500, "t1", "bravo"));
  CHECK_FALSE(rig.dialer->dialAttached(rig.links[5]->dialId, 501, "t2", "alpha"));
  // An old dial's id is no longer wanted either.
  CHECK_FALSE(rig.dialer->dialAttached(rig.links[0]->dialId, 502, "t1", "alpha"));
  CHECK(rig.dialer->dialAttached(rig.links[6]->dialId, 600, "t1", "alpha"));
  CHECK(rig.dialer->counters().up == 1);

  // The address removed: the link closes, and nothing is dialed any more.
  rig.closedBridges.clear();
  rig.dialer->onRecord(recordOf(3, "", 0));
  CHECK(rig.closedBridges == std::vector<uint64_t>{600});
  CHECK(rig.dialer->counters().up == 0);
  CHECK(rig.dialer->targetCount() == 0);
  const uint64_t started = rig.dialer->counters().started;
  rig.advance(3'000, 250, &origin);
  CHECK(rig.dialer->counters().started == started);
  // An older revision changes nothing.
  rig.dialer->onRecord(recordOf(2, origin.address(), 4));
  CHECK(rig.dialer->targetCount() == 0);
}

TEST_CASE("direct dialer: a refusing address backs off; a deleted tunnel stops the dials") {
  FakeOrigin origin;
  origin.refuse();
  DialerRig rig;
  rig.dialer->onRecord(recordOf(1, origin.address(), 4));
  // 60 s of manual time in 250 ms steps: with no backoff that would be 240 ticks of 4 dials.
  rig.advance(60'000, 500);
  const auto& counters = rig.dialer->counters();
  CAPTURE(counters.started);
  CHECK(counters.failedBy(DialFailure::kConnect) >= 4);
  CHECK(counters.failedBy(DialFailure::kConnect) + 1 >= counters.started);
  // The first round of 4, then one probe per wait: 0.25+0.5+1+2 s, then 2-4, 4-8, 8-16, 16-32 s.
  CHECK(counters.started <= 12);
  CHECK(counters.up == 0);
  CHECK(rig.links.empty());
  rig.dialer->onTunnelGone("t1");
  CHECK(rig.dialer->targetCount() == 0);
  const uint64_t started = counters.started;
  rig.advance(5'000, 250);
  CHECK(rig.dialer->counters().started == started);
}

TEST_CASE("direct dialer: a dial that never attaches fails at the deadline") {
  FakeOrigin origin;
  DialerRig rig;
  rig.dialer->onRecord(recordOf(1, origin.address(), 1));
  REQUIRE(rig.runUntil([&] { return rig.links.size() == 1; }, &origin));
  rig.advance(DirectDialer::kDialDeadlineMs + 500, 500, &origin);
  CHECK(rig.dialer->counters().failedBy(DialFailure::kTimeout) == 1);
  // Its late attach is refused; the next dial goes out after the backoff.
  CHECK_FALSE(rig.dialer->dialAttached(rig.links[0]->dialId, 7, "t1", "alpha"));
  rig.advance(1'000, 250, &origin);
  CHECK(rig.runUntil([&] { return rig.links.size() == 2; }, &origin));
}

TEST_CASE("direct dialer: private addresses are refused without DIRECT_ALLOW_PRIVATE") {
  FakeOrigin origin;
  DialerRig rig(false);
  rig.dialer->onRecord(recordOf(1, origin.address(), 2));
  REQUIRE(rig.runUntil(
      [&] { return rig.dialer->counters().failedBy(DialFailure::kRefusedAddress) >= 1; }));
  rig.advance(1'000, 250, &origin);
  CHECK(origin.accepted.empty());
  CHECK(rig.links.empty());
  CHECK(rig.dialer->counters().failedBy(DialFailure::kConnect) == 0);
}

TEST_CASE("direct dialer: DIRECT_MODE off dials nothing") {
  FakeOrigin origin;
  ot::test::ManualRelayLoop base;
  base.config.directMode = false;
  DirectDialer dialer(*base.context, {});
  dialer.start();
  dialer.onRecord(recordOf(1, origin.address(), 2));
  CHECK(dialer.targetCount() == 0);
  CHECK(dialer.counters().started == 0);
  dialer.close();
  for (int i = 0; i < 10; ++i) uv_run(&base.loop, UV_RUN_NOWAIT);
}
