#include "client/pool_rules.h"

#include <doctest/doctest.h>

#include <variant>

#include "common/bridge_control.h"

namespace {

using namespace ot::client;

ot::bridge::Attached parseAttached(const std::string& json) {
  auto parsed = ot::bridge::parseRelayMessage(json);
  REQUIRE(parsed.ok());
  REQUIRE(std::holds_alternative<ot::bridge::Attached>(parsed.value()));
  return std::get<ot::bridge::Attached>(parsed.value());
}

}  // namespace

TEST_CASE("client pool rules: a credential refuses a relay older than bridge protocol 2") {
  // A relay from before pools sends no "protocol".
  const auto old = parseAttached(
      R"({"type":"attached","bridge_id":"b1","limits":{"max_conns":256,"max_payload":16384,)"
      R"("window":262144},"heartbeat_ms":15000})");
  CHECK(old.protocol == 1);
  const auto refusal = refuseAttached(old, true);
  REQUIRE(refusal);
  CHECK(*refusal ==
        "this relay speaks bridge protocol 1 and does not know origins; upgrade it or use the "
        "tunnel token");
  CHECK_FALSE(refuseAttached(old, false));  // the tunnel token works as before

  auto current = old;
  current.protocol = 2;
  CHECK_FALSE(refuseAttached(current, true));
  CHECK_FALSE(refuseAttached(current, false));
}

TEST_CASE("client pool rules: bad_token and a revoked credential say what happened") {
  CHECK(badTokenText(false, "token does not match") ==
        "attach_error bad_token: token does not match");
  const std::string withCredential = badTokenText(true, "");
  CHECK(withCredential.find("origin was removed") != std::string::npos);
  CHECK(withCredential.find("rotated") != std::string::npos);
  CHECK(credentialRevoked(1008, "credential revoked"));
  CHECK_FALSE(credentialRevoked(1008, "policy"));
  CHECK_FALSE(credentialRevoked(1000, "credential revoked"));
  CHECK(revokedText().find("credential revoked") != std::string::npos);
}
