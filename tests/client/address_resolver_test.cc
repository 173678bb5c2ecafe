// Turning relay and local target names into addresses.
#include "common/address_resolver.h"

#include <doctest/doctest.h>

#include <string>

#include "client/server_url.h"
#include "tests/client/test_support.h"

TEST_CASE("client address: localhost names never go to DNS; literals parse") {
  using ot::formatAddress;
  using ot::resolveWithoutDns;
  CHECK(formatAddress(*resolveWithoutDns("localhost", 443)) == "127.0.0.1:443");
  CHECK(formatAddress(*resolveWithoutDns("opentunnel.localhost", 8443)) == "127.0.0.1:8443");
  CHECK(formatAddress(*resolveWithoutDns("A.B.LOCALHOST.", 1)) == "127.0.0.1:1");
  CHECK(formatAddress(*resolveWithoutDns("192.0.2.7", 80)) == "192.0.2.7:80");
  CHECK(formatAddress(*resolveWithoutDns("[::1]", 80)) == "[::1]:80");
  CHECK(formatAddress(*resolveWithoutDns("::1", 80)) == "[::1]:80");
  CHECK_FALSE(resolveWithoutDns("example.com", 443).has_value());
  CHECK_FALSE(resolveWithoutDns("notlocalhost", 443).has_value());
  CHECK_FALSE(resolveWithoutDns("localhost.example", 443).has_value());
  // One rule for the API's URL and for every connection: case and a trailing dot do not matter.
  CHECK(formatAddress(*resolveWithoutDns("Relay.LocalHost.", 443)) == "127.0.0.1:443");
  CHECK(ot::isLocalhostName("LOCALHOST"));
  CHECK(ot::isLocalhostName("a.b.localhost."));
  CHECK_FALSE(ot::isLocalhostName(".localhost"));
  CHECK_FALSE(ot::isLocalhostName("xlocalhost"));
  CHECK_FALSE(ot::isLocalhostName("localhost.example"));
  auto fqdn = ot::client::parseServerUrl("https://opentunnel.localhost.:8443", nullptr);
  REQUIRE(fqdn.has_value());
  CHECK(fqdn->isLoopbackName());
}

TEST_CASE("client address: a DNS query answers on the loop; a cancelled one never calls back") {
  ot::client_test::TestLoop loop;
  int calls = 0;
  int status = -1;
  std::string address;
  int error = 0;
  auto* query = ot::DnsQuery::start(
      loop.get(), "localhost", 8080,
      [&](int s, const sockaddr_storage& a) {
        ++calls;
        status = s;
        address = ot::formatAddress(a);
      },
      &error);
  REQUIRE(query != nullptr);
  REQUIRE(loop.runUntil([&] { return calls == 1; }));
  CHECK(status == 0);
  CHECK((address == "127.0.0.1:8080" || address == "[::1]:8080"));

  bool cancelledCalled = false;
  auto* cancelled = ot::DnsQuery::start(
      loop.get(), "localhost", 1, [&](int, const sockaddr_storage&) { cancelledCalled = true; },
      &error);
  REQUIRE(cancelled != nullptr);
  cancelled->cancel();
  // The request still completes inside libuv (and frees itself); nobody is called.
  loop.runFor(200);
  CHECK_FALSE(cancelledCalled);
}

TEST_CASE(
    "client address: resolve answers a .localhost name at once and looks a name up on the loop") {
  ot::client_test::TestLoop loop;
  int calls = 0;
  int status = -1;
  std::string address;
  const ot::DnsQuery::Callback record = [&](int s, const sockaddr_storage& a) {
    ++calls;
    status = s;
    address = ot::formatAddress(a);
  };
  CHECK(ot::DnsQuery::resolve(loop.get(), "tunnel.localhost", 8443, record) == nullptr);
  CHECK(calls == 1);  // inside the call: no lookup was needed
  CHECK(status == 0);
  CHECK(address == "127.0.0.1:8443");

  // A name that needs DNS is looked up on the loop: no answer inside the call. (Cancelled: the
  // test needs no network.)
  auto* query = ot::DnsQuery::resolve(loop.get(), "relay.example.invalid", 443, record);
  REQUIRE(query != nullptr);
  CHECK(calls == 1);
  query->cancel();
  loop.runFor(200);
  CHECK(calls == 1);
}
