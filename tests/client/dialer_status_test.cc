#include "client/dialer_status.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "client/origin_material.h"
#include "tests/client/test_support.h"

namespace {

using namespace ot::client;

DialerStatus sample() {
  DialerStatus status;
  status.tunnelId = "t1";
  status.origin = "web-1";
  ProfileStatus good;
  good.name = "main";
  good.host = "relay.example";
  good.port = 443;
  good.sni = "relay.example";
  good.addresses.push_back({"192.0.2.1", 4, 4, 3, 0, ""});
  good.addresses.push_back({"2001:db8::1", 4, 0, 0, 12'500, "connection refused"});
  ProfileStatus unresolved;
  unresolved.name = "alt";
  unresolved.index = 1;
  unresolved.host = "alt.example";
  unresolved.port = 8443;
  unresolved.resolveError = "cannot resolve alt.example: unknown node or service";
  status.profiles = {good, unresolved};
  return status;
}

}  // namespace

TEST_CASE("client status file: JSON round trip and path") {
  const DialerStatus status = sample();
  auto parsed = parseStatusJson(statusToJson(status, 1'700'000'000'000, 42));
  REQUIRE(parsed.ok());
  CHECK(parsed->status == status);
  CHECK(parsed->updatedUnixMs == 1'700'000'000'000);
  CHECK(parsed->pid == 42);
  CHECK(statusFilePath("/s", "t1") == "/s/t1.status.json");
  CHECK_FALSE(parseStatusJson("[]").ok());
  CHECK_FALSE(parseStatusJson(R"({"tunnelId":"t1"})").ok());
}

TEST_CASE("client status file: stale after 15 s; the table shows links, next try and error") {
  CHECK_FALSE(statusStale(1'000, 16'000));
  CHECK(statusStale(1'000, 16'001));
  CHECK_FALSE(statusStale(20'000, 1'000));  // a clock step back is not staleness
  StatusFile file{sample(), 100'000, 42};
  const std::string table = renderStatusTable(file, 101'000);
  CHECK(table.find("origin web-1 (tunnel token): running (pid 42)") != std::string::npos);
  CHECK(table.find("0:main") != std::string::npos);
  CHECK(table.find("4/4") != std::string::npos);
  CHECK(table.find("0/4") != std::string::npos);
  CHECK(table.find("12.5 s") != std::string::npos);
  CHECK(table.find("connection refused") != std::string::npos);
  CHECK(table.find("alt.example (unresolved)") != std::string::npos);
  CHECK(renderStatusTable(file, 200'000).find("not running (last report 100.0 s ago)") !=
        std::string::npos);
}

TEST_CASE("client origin material: a state file copy without its token is enough") {
  const std::string key = ot::client_test::pki().tunnel.keyPem;
  const nlohmann::json copy = {
      {"server", "https://t.example"}, {"id", "t1"}, {"hostname", "t1.t.example"},
      {"url", "https://t1.t.example"}, {"key", key}, {"chain", "CHAIN"}};
  auto state = parseOriginState(copy.dump(), true);
  REQUIRE(state.ok());
  CHECK(state->id == "t1");
  CHECK(state->token.empty());
  CHECK(state->chainPem == "CHAIN");
  auto withToken = copy;
  withToken["token"] = "tk_secret";
  auto kept = parseOriginState(withToken.dump(), true);
  REQUIRE(kept.ok());
  CHECK(kept->token.empty());  // never used, never kept
  auto noChain = copy;
  noChain.erase("chain");
  CHECK_FALSE(parseOriginState(noChain.dump(), true).ok());
  CHECK(parseOriginState(noChain.dump(), false).ok());  // passthrough needs no chain here
  auto noKey = copy;
  noKey["key"] = "garbage";
  CHECK_FALSE(parseOriginState(noKey.dump(), true).ok());
  CHECK_FALSE(parseOriginState("[]", true).ok());
}
