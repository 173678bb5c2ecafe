// The mesh settings (controld/mesh/mesh_settings.h, controld_config.cc's mesh flags) and the pure
// rules the node runs on: which link a pair keeps (link_admission.h), the dial schedule
// (peer_directory.h), and this machine's bridges as numbered deltas (local_bridges.h).
#include "controld/mesh/mesh_settings.h"

#include <doctest/doctest.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "controld/controld_config.h"
#include "controld/mesh/link_admission.h"
#include "controld/mesh/local_bridges.h"
#include "controld/mesh/peer_directory.h"

using namespace ot::mesh;

namespace {

const std::string kToken(32, 'k');

MeshFlags meshOn() {
  MeshFlags flags;
  flags.internalListen = *ot::config::parseListenAddress("127.0.0.11:9000");
  flags.internalToken = kToken;
  return flags;
}

ot::Result<std::optional<MeshSettings>> check(const MeshFlags& flags) {
  return checkMeshFlags(flags, "m-a", "iad", "/run/opentunnel/control.sock");
}

std::string errorOf(const MeshFlags& flags) {
  auto checked = check(flags);
  return checked.ok() ? std::string("ok") : checked.error().message;
}

}  // namespace

TEST_CASE("mesh settings: INTERNAL_LISTEN off means no mesh, whatever else is set") {
  MeshFlags flags;
  flags.peers = "not an address";
  auto checked = check(flags);
  REQUIRE(checked.ok());
  CHECK_FALSE(checked->has_value());
}

TEST_CASE("mesh settings: defaults and what INTERNAL_LISTEN implies") {
  auto checked = check(meshOn());
  REQUIRE(checked.ok());
  const MeshSettings& s = **checked;
  CHECK(s.internalAddress.toString() == "127.0.0.11:9000");
  CHECK(s.machineId == "m-a");
  CHECK(s.region == "iad");
  CHECK(s.pingMs == 1'000);
  CHECK(s.deadMs == 5'000);
  CHECK(s.discoveryMs == 5'000);
  CHECK(s.verifyAddress);
  CHECK(s.handoffSocket == "/run/opentunnel/mesh-handoff.sock");
  CHECK(s.dnsName.empty());
}

TEST_CASE("mesh settings: the token is required, at least 32 bytes, and never in an error") {
  MeshFlags flags = meshOn();
  flags.internalToken.clear();
  CHECK(errorOf(flags).find("INTERNAL_TOKEN is required") != std::string::npos);
  flags.internalToken = "short-secret-value";
  const std::string error = errorOf(flags);
  CHECK(error.find("at least 32 bytes") != std::string::npos);
  CHECK(error.find("short-secret-value") == std::string::npos);
}

TEST_CASE("mesh settings: addresses, peers, DNS and timers are checked") {
  MeshFlags flags = meshOn();
  flags.internalListen = *ot::config::parseListenAddress("0.0.0.0:9000");
  CHECK(errorOf(flags).find("INTERNAL_ADDRESS is required") != std::string::npos);
  flags.internalAddress = "[fdaa::3]:9000";
  auto v6 = check(flags);
  REQUIRE(v6.ok());
  CHECK((*v6)->internalAddress.toString() == "[fdaa::3]:9000");
  flags.internalAddress = "machine.internal:9000";
  CHECK(errorOf(flags).find("INTERNAL_ADDRESS must be an IP address") != std::string::npos);

  flags = meshOn();
  flags.peers = " 127.0.0.12:9000, peer.example:9001 ,127.0.0.11:9000,";
  auto peers = check(flags);
  REQUIRE(peers.ok());
  REQUIRE((*peers)->peers.size() == 2);  // this machine's own address is left out
  CHECK((*peers)->peers[0].toString() == "127.0.0.12:9000");
  CHECK((*peers)->peers[1].toString() == "peer.example:9001");
  flags.peers = "127.0.0.12";
  CHECK(errorOf(flags).find("MESH_PEERS: '127.0.0.12' is not host:port") != std::string::npos);

  flags = meshOn();
  flags.dns = "opentunnel.internal";
  auto dns = check(flags);
  REQUIRE(dns.ok());
  CHECK((*dns)->dnsName == "opentunnel.internal");
  CHECK((*dns)->dnsPort == 9000);
  flags.dns = "off";
  CHECK((*check(flags))->dnsName.empty());

  flags = meshOn();
  flags.pingMs = 100;
  flags.deadMs = 100;
  CHECK(errorOf(flags).find("MESH_DEAD_MS (100) must be longer than MESH_PING_MS") !=
        std::string::npos);
  flags.deadMs = 500;
  CHECK(errorOf(flags) == "ok");
  flags.discoveryMs = 0;
  CHECK(errorOf(flags).find("MESH_DISCOVERY_MS") != std::string::npos);

  flags = meshOn();
  flags.internalListen = *ot::config::parseListenAddress("unix:/tmp/x.sock");
  CHECK(errorOf(flags).find("must be a TCP address") != std::string::npos);
}

TEST_CASE("mesh settings: controld's flags and environment variables reach MeshFlags") {
  ot::controld::ControldConfig config;
  CLI::App app;
  ot::controld::addControldFlags(app, config);
  std::vector<std::string> args = {"--internal-listen=127.0.0.11:9000",
                                   "--internal-token=" + kToken,
                                   "--internal-address=127.0.0.11:9000",
                                   "--mesh-peers=127.0.0.12:9000",
                                   "--mesh-dns=app.internal",
                                   "--mesh-discovery-ms=250",
                                   "--mesh-ping-ms=100",
                                   "--mesh-dead-ms=500",
                                   "--mesh-verify-address=false",
                                   "--mesh-handoff-socket=/tmp/h.sock"};
  std::reverse(args.begin(), args.end());  // CLI11 takes the vector last argument first
  app.parse(args);
  CHECK(config.mesh.internalListen.toString() == "127.0.0.11:9000");
  CHECK(config.mesh.internalToken == kToken);
  CHECK(config.mesh.internalAddress == "127.0.0.11:9000");
  CHECK(config.mesh.peers == "127.0.0.12:9000");
  CHECK(config.mesh.dns == "app.internal");
  CHECK(config.mesh.discoveryMs == 250);
  CHECK(config.mesh.pingMs == 100);
  CHECK(config.mesh.deadMs == 500);
  CHECK_FALSE(config.mesh.verifyAddress);
  CHECK(config.mesh.handoffSocket == "/tmp/h.sock");
  // --help never shows the token's value.
  CHECK(app.help().find(kToken) == std::string::npos);

  ot::controld::ControldConfig defaults;
  CLI::App plain;
  ot::controld::addControldFlags(plain, defaults);
  plain.parse(std::vector<std::string>{});
  CHECK_FALSE(defaults.mesh.internalListen.enabled());
  CHECK(defaults.mesh.verifyAddress);
}

TEST_CASE("mesh addresses: one spelling, one order") {
  CHECK(canonicalAddress("[::ffff:127.0.0.1]:80") == "127.0.0.1:80");
  CHECK(canonicalAddress("[2001:DB8::1]:443") == "[2001:db8::1]:443");
  CHECK_FALSE(canonicalAddress("127.0.0.1:0"));
  CHECK_FALSE(canonicalAddress("127.0.0.1:080"));
  CHECK_FALSE(canonicalAddress("::1:80"));
  CHECK(addressLess("127.0.0.9:9000", "127.0.0.11:9000"));  // by value, not by text
  CHECK(addressLess("127.0.0.11:80", "127.0.0.11:9000"));
  CHECK_FALSE(addressLess("127.0.0.11:9000", "127.0.0.11:9000"));
}

TEST_CASE("link admission: address checks and one link per pair") {
  LinkFacts inbound;
  inbound.hello.address = "127.0.0.13:9000";
  inbound.hello.startedAtMs = 10;
  inbound.hello.epoch = 1;
  inbound.remoteAddress = "127.0.0.13:51234";
  CHECK(admitLink(inbound, nullptr, "127.0.0.11:9000", true) == Admission::kAccept);
  LinkFacts spoofed = inbound;
  spoofed.remoteAddress = "127.0.0.14:51234";
  CHECK(admitLink(spoofed, nullptr, "127.0.0.11:9000", true) == Admission::kWrongAddress);
  CHECK(admitLink(spoofed, nullptr, "127.0.0.11:9000", false) == Admission::kAccept);
  LinkFacts outbound = inbound;
  outbound.outbound = true;
  outbound.remoteAddress.clear();
  outbound.dialTarget = "127.0.0.13:9000";
  CHECK(admitLink(outbound, nullptr, "127.0.0.11:9000", true) == Admission::kAccept);
  outbound.dialTarget = "127.0.0.13:9001";
  CHECK(admitLink(outbound, nullptr, "127.0.0.11:9000", true) == Admission::kWrongAddress);
  outbound.dialTarget = "127.0.0.13:9000";
  LinkFacts bad = inbound;
  bad.hello.address = "somewhere";
  CHECK(admitLink(bad, nullptr, "127.0.0.11:9000", false) == Admission::kBadAddress);

  // Same life, both dialed: the link dialed by the lower address stays, on both machines.
  // This machine (.11) is lower than the peer (.13): its own dial wins.
  CHECK(admitLink(outbound, &inbound, "127.0.0.11:9000", true) == Admission::kReplaceExisting);
  CHECK(admitLink(inbound, &outbound, "127.0.0.11:9000", true) == Admission::kDuplicate);
  // Seen from a machine above the peer (.20): the peer's dial wins.
  CHECK(admitLink(inbound, &outbound, "127.0.0.20:9000", true) == Admission::kReplaceExisting);
  CHECK(admitLink(outbound, &inbound, "127.0.0.20:9000", true) == Admission::kDuplicate);
  // Lives: the newer one wins whatever the direction; an older one is refused.
  LinkFacts restarted = inbound;
  restarted.hello.startedAtMs = 20;
  CHECK(admitLink(restarted, &outbound, "127.0.0.11:9000", true) == Admission::kReplaceExisting);
  CHECK(admitLink(outbound, &restarted, "127.0.0.11:9000", true) == Admission::kStaleLife);
  // The machine linked from elsewhere keeps its link.
  LinkFacts elsewhere = inbound;
  elsewhere.hello.address = "127.0.0.14:9000";
  elsewhere.remoteAddress = "127.0.0.14:5000";
  elsewhere.hello.startedAtMs = 99;
  CHECK(admitLink(elsewhere, &inbound, "127.0.0.11:9000", true) == Admission::kAlreadyLinked);
}

TEST_CASE("peer directory: the higher address waits, failures back off, DNS leftovers expire") {
  MeshSettings settings;
  PeerDirectory directory("127.0.0.12:9000", settings, [] { return 0.5; });
  directory.addConfigured("127.0.0.11:9000", 0);  // lower than us: we wait 2 s
  directory.addConfigured("127.0.0.13:9000", 0);  // higher: at once
  CHECK(directory.dueDials(0) == std::vector<std::string>{"127.0.0.13:9000"});
  CHECK(directory.dueDials(1'999).empty());
  CHECK(directory.dueDials(2'000) == std::vector<std::string>{"127.0.0.11:9000"});
  directory.dialEnded("127.0.0.13:9000", false, 2'000);
  CHECK(directory.count(PeerState::kUnreachable) == 1);
  CHECK(directory.dueDials(2'199).empty());
  CHECK(directory.dueDials(2'200) == std::vector<std::string>{"127.0.0.13:9000"});  // 200 ms
  int64_t now = 2'200;
  for (int i = 0; i < 8; ++i) directory.dialEnded("127.0.0.13:9000", false, now);
  CHECK(directory.dueDials(now + 4'999).empty());  // capped at 5 s
  CHECK(directory.dueDials(now + 5'000) == std::vector<std::string>{"127.0.0.13:9000"});
  directory.linkUp("127.0.0.13:9000", "m-c");
  CHECK(directory.count(PeerState::kUp) == 1);
  CHECK(directory.dueDials(now + 60'000).size() == 0);  // .11 still dialing, .13 up

  directory.sawInDns({"127.0.0.20:9000", "127.0.0.12:9000"}, 10'000);
  CHECK(directory.known("127.0.0.20:9000"));
  CHECK_FALSE(directory.known("127.0.0.12:9000"));  // ourselves
  directory.expire(40'000);
  CHECK(directory.known("127.0.0.20:9000"));  // 30 s more
  directory.expire(40'001);
  CHECK_FALSE(directory.known("127.0.0.20:9000"));
  CHECK(directory.known("127.0.0.11:9000"));  // configured: never expires
}

TEST_CASE("local bridges: registry changes become numbered deltas, a replaced set its difference") {
  LocalBridges local("m-a");
  using ot::controld::BridgeEntry;
  const BridgeEntry b1{"b1", "t1", {}, "", "", 0, 5, ""};
  const BridgeEntry b2{"b2", "t1", {"api"}, "", "", 0, 6, ""};
  auto frames = local.apply({LocalChange::Kind::kReplaced, "r1", {b1, b2}, {}});
  REQUIRE(frames.size() == 2);
  CHECK(std::get<Attached>(frames[0]).sequence == 1);
  CHECK(std::get<Attached>(frames[0]).bridge.routes == std::vector<std::string>{""});
  CHECK(std::get<Attached>(frames[0]).bridge.machine.empty());  // implied by the link
  CHECK(local.snapshot().front().machine == "m-a");
  // The same set again: nothing to say.
  CHECK(local.apply({LocalChange::Kind::kReplaced, "r1", {b1, b2}, {}}).empty());
  // b1 gone, b3 new: one detached, one attached.
  const BridgeEntry b3{"b3", "t2", {""}, "", "", 0, 7, ""};
  frames = local.apply({LocalChange::Kind::kReplaced, "r1", {b2, b3}, {}});
  REQUIRE(frames.size() == 2);
  CHECK(std::get<Detached>(frames[0]).bridgeId == "b1");
  CHECK(std::get<Detached>(frames[0]).sequence == 3);
  CHECK(std::get<Attached>(frames[1]).bridge.bridgeId == "b3");
  // Another relay's detach of b2 is not this relay's bridge.
  CHECK(local.apply({LocalChange::Kind::kDetached, "r2", {}, "b2"}).empty());
  frames = local.apply({LocalChange::Kind::kDropped, "r1", {}, {}});
  CHECK(frames.size() == 2);
  CHECK(local.size() == 0);
  CHECK(local.sequence() == 6);
}
