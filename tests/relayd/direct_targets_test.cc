// Direct mode's pure part (relayd/direct_targets.h): the address grammar, the addresses refused
// without DIRECT_ALLOW_PRIVATE, the targets read from a record, and one target's dial schedule.
#include "relayd/direct_targets.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>

#include <string>

using ot::relayd::DirectSchedule;
using ot::relayd::parseDirectAddress;
using ot::relayd::refusedAddressReason;

namespace {

std::string reasonOf(const char* text) {
  sockaddr_storage storage{};
  if (std::string(text).find(':') != std::string::npos) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
    v6->sin6_family = AF_INET6;
    REQUIRE(::inet_pton(AF_INET6, text, &v6->sin6_addr) == 1);
  } else {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
    v4->sin_family = AF_INET;
    REQUIRE(::inet_pton(AF_INET, text, &v4->sin_addr) == 1);
  }
  const auto reason = refusedAddressReason(storage);
  return reason ? std::string(*reason) : std::string("public");
}

}  // namespace

TEST_CASE("direct targets: the address grammar") {
  auto v4 = parseDirectAddress("203.0.113.7:8443");
  REQUIRE(v4);
  CHECK(v4->host == "203.0.113.7");
  CHECK(v4->port == 8443);
  auto v6 = parseDirectAddress("[2001:db8::1]:443");
  REQUIRE(v6);
  CHECK(v6->host == "2001:db8::1");
  CHECK(v6->port == 443);
  auto name = parseDirectAddress("origin.example.com:1");
  REQUIRE(name);
  CHECK(name->host == "origin.example.com");
  CHECK(parseDirectAddress("origin.example.com:65535"));
  for (const char* bad :
       {"", "host", "host:", "host:0", "host:65536", "host:12a", ":443", "[2001:db8::1]",
        "[2001:db8::1]443", "[nothex]:443", "2001:db8::1:443", "bad host:443", "host:-1"}) {
    CAPTURE(bad);
    CHECK_FALSE(parseDirectAddress(bad));
  }
  CHECK(parseDirectAddress(std::string(250, 'a') + ":443"));        // 254 characters
  CHECK_FALSE(parseDirectAddress(std::string(252, 'a') + ":443"));  // 256: too long
}

TEST_CASE("direct targets: addresses refused without DIRECT_ALLOW_PRIVATE") {
  CHECK(reasonOf("203.0.113.7") == "public");
  CHECK(reasonOf("8.8.8.8") == "public");
  CHECK(reasonOf("2001:db8::1") == "public");
  CHECK(reasonOf("127.0.26.1") == "loopback");
  CHECK(reasonOf("::1") == "loopback");
  CHECK(reasonOf("10.1.2.3") == "private");
  CHECK(reasonOf("172.16.0.1") == "private");
  CHECK(reasonOf("172.31.255.255") == "private");
  CHECK(reasonOf("172.32.0.1") == "public");
  CHECK(reasonOf("192.168.1.1") == "private");
  CHECK(reasonOf("100.64.0.1") == "private");
  CHECK(reasonOf("fc00::1") == "private");
  CHECK(reasonOf("fd12:3456::1") == "private");
  CHECK(reasonOf("169.254.169.254") == "link_local");
  CHECK(reasonOf("fe80::1") == "link_local");
  CHECK(reasonOf("224.0.0.1") == "multicast");
  CHECK(reasonOf("ff02::1") == "multicast");
  CHECK(reasonOf("0.0.0.0") == "unspecified");
  CHECK(reasonOf("::") == "unspecified");
  CHECK(reasonOf("::ffff:127.0.0.1") == "loopback");  // IPv4-mapped: judged as IPv4
  CHECK(reasonOf("::ffff:192.168.0.1") == "private");
  CHECK(reasonOf("::ffff:203.0.113.7") == "public");
}

TEST_CASE("direct targets: read from a record's origins") {
  ot::relayd::v1::TunnelRecord record;
  record.set_tunnel_id("t1");
  record.set_credential_generation(3);
  auto* alpha = record.add_origins();
  alpha->set_name("alpha");
  alpha->set_credential_sha256(std::string(32, 'a'));
  alpha->set_direct_address("203.0.113.7:8443");
  alpha->set_direct_links(2);
  auto* bravo = record.add_origins();  // reverse mode: no direct address
  bravo->set_name("bravo");
  auto* charlie = record.add_origins();
  charlie->set_name("charlie");
  charlie->set_direct_address("[2001:db8::1]:443");  // links 0: the default
  auto* delta = record.add_origins();
  delta->set_name("delta");
  delta->set_direct_address("not an address");
  auto* echo = record.add_origins();
  echo->set_name("echo");
  echo->set_direct_address("echo.example:1");
  echo->set_direct_links(99);  // clamped
  const auto targets = ot::relayd::directTargetsOf(record);
  REQUIRE(targets.size() == 3);
  CHECK(targets[0].origin == "alpha");
  CHECK(targets[0].tunnelId == "t1");
  CHECK(targets[0].links == 2);
  CHECK(targets[0].credentialGeneration == 3);
  CHECK(targets[0].credentialSha256 == std::string(32, 'a'));
  CHECK(targets[1].origin == "charlie");
  CHECK(targets[1].links == ot::relayd::kDefaultDirectLinks);
  CHECK(targets[2].origin == "echo");
  CHECK(targets[2].links == ot::relayd::kMaxDirectLinks);
  record.set_deleted(true);
  CHECK(ot::relayd::directTargetsOf(record).empty());
}

TEST_CASE("direct targets: the schedule dials the links, then redials what ends") {
  DirectSchedule schedule(3, [](uint64_t n) { return n; });  // the longest wait of each range
  CHECK(schedule.dialsDue(0) == 3);
  for (int i = 0; i < 3; ++i) schedule.dialStarted();
  CHECK(schedule.dialsDue(0) == 0);
  for (int i = 0; i < 3; ++i) schedule.dialAttached();
  CHECK(schedule.up() == 3);
  CHECK(schedule.inFlight() == 0);
  CHECK(schedule.dialsDue(1'000) == 0);
  schedule.bridgeEnded(1'000);  // redialed after a short wait
  CHECK(schedule.up() == 2);
  CHECK(schedule.dialsDue(1'000) == 0);
  CHECK(schedule.dialsDue(1'000 + 2 * DirectSchedule::kAfterEndedMs) == 1);
}

TEST_CASE("direct targets: failed dials back off, doubling to 60 s, one probe at a time") {
  uint64_t jitter = 0;  // 0: the shortest wait (b/2), else the longest (b)
  DirectSchedule schedule(4, [&](uint64_t n) { return jitter == 0 ? 0 : n; });
  uint64_t now = 0;
  for (int i = 0; i < 4; ++i) schedule.dialStarted();
  // The first failure: base 500 ms, wait 250 ms with no jitter.
  CHECK(schedule.dialFailed(now) == 250);
  // The others of the first round fail too: each doubles the base.
  CHECK(schedule.dialFailed(now) == 500);
  CHECK(schedule.dialFailed(now) == 1'000);
  CHECK(schedule.dialFailed(now) == 2'000);
  CHECK(schedule.failuresInARow() == 4);
  CHECK(schedule.dialsDue(now + 1'999) == 0);
  // While failing, one probe at a time, not the four links.
  now += 2'000;
  CHECK(schedule.dialsDue(now) == 1);
  schedule.dialStarted();
  CHECK(schedule.dialsDue(now) == 0);
  jitter = 1;
  uint64_t last = 0;
  for (int i = 0; i < 20; ++i) {
    last = schedule.dialFailed(now);
    now += last;
    CHECK(schedule.dialsDue(now) == 1);
    schedule.dialStarted();
  }
  CHECK(last == DirectSchedule::kCapMs);  // capped
  // One attaches: the counts reset and the other links are dialed at once.
  schedule.dialAttached();
  CHECK(schedule.failuresInARow() == 0);
  CHECK(schedule.dialsDue(now) == 3);
}
