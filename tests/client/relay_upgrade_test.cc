// The bridge upgrade exchange as pure logic (docs/protocol.md section 1).
#include "client/relay_upgrade.h"

#include <doctest/doctest.h>

#include <array>
#include <string>

#include "common/websocket_handshake.h"

using ot::client::RelayUpgrade;

namespace {

std::span<const uint8_t> bytes(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

constexpr std::array<uint8_t, 16> kNonce = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

}  // namespace

TEST_CASE("client upgrade: the request names the bridge path, host and user agent") {
  auto upgrade = RelayUpgrade::create("opentunnel.example", "/api/tunnel/k3x9q2/bridge",
                                      "otunnel/0.1.0", kNonce);
  REQUIRE(upgrade);
  CHECK(upgrade->request() ==
        "GET /api/tunnel/k3x9q2/bridge HTTP/1.1\r\n"
        "Host: opentunnel.example\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: AQIDBAUGBwgJCgsMDQ4PEA==\r\n"
        "Sec-WebSocket-Version: 13\r\n"
        "User-Agent: otunnel/0.1.0\r\n\r\n");
  CHECK_FALSE(RelayUpgrade::create("opentunnel.example", "/api/tunnel/a b/bridge", "", kNonce));
}

TEST_CASE("client upgrade: 101 with the right accept key; what follows is WebSocket") {
  auto upgrade = RelayUpgrade::create("d.example", "/api/tunnel/t/bridge", "", kNonce);
  REQUIRE(upgrade);
  const std::string answer = ot::ws::buildUpgradeResponse("AQIDBAUGBwgJCgsMDQ4PEA==");
  const std::string wire = answer + "\x81\x02hi";
  // Byte by byte up to the end of the head, then the rest at once.
  for (size_t i = 0; i + 1 < answer.size(); ++i) {
    const auto step = upgrade->feed(bytes(wire.substr(i, 1)));
    REQUIRE(step.outcome == RelayUpgrade::Outcome::kNeedMore);
  }
  const auto step = upgrade->feed(bytes(wire.substr(answer.size() - 1)));
  CHECK(step.outcome == RelayUpgrade::Outcome::kUpgraded);
  CHECK(step.consumed == 1);  // the WebSocket frame is left for the caller
}

TEST_CASE("client upgrade: a wrong accept key fails; a refusal carries status and _tag") {
  auto wrongKey = RelayUpgrade::create("d.example", "/api/tunnel/t/bridge", "", kNonce);
  const auto bad = wrongKey->feed(bytes(ot::ws::buildUpgradeResponse("AAAAAAAAAAAAAAAAAAAAAA==")));
  CHECK(bad.outcome == RelayUpgrade::Outcome::kFailed);
  CHECK(bad.failure.httpStatus == 0);
  CHECK(bad.failure.text == "bad upgrade answer: " + std::string(ot::ws::responseErrorName(
                                                         ot::ws::ResponseError::kAcceptMismatch)));

  auto refused = RelayUpgrade::create("d.example", "/api/tunnel/t/bridge", "", kNonce);
  const std::string body = R"({"_tag":"NotFoundError","message":"no such tunnel"})";
  const auto step = refused->feed(
      bytes("HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: " +
            std::to_string(body.size()) + "\r\n\r\n" + body));
  CHECK(step.outcome == RelayUpgrade::Outcome::kFailed);
  CHECK(step.failure.httpStatus == 404);
  CHECK(step.failure.tag == "NotFoundError");
  CHECK(step.failure.text == "upgrade refused: HTTP 404 NotFoundError: no such tunnel");

  // A body that runs to the end of the connection completes on finish().
  auto untilClose = RelayUpgrade::create("d.example", "/api/tunnel/t/bridge", "", kNonce);
  CHECK(untilClose->feed(bytes("HTTP/1.1 503 Unavailable\r\n\r\n{\"_tag\":\"Service")).outcome ==
        RelayUpgrade::Outcome::kNeedMore);
  const auto closed = untilClose->finish();
  CHECK(closed.outcome == RelayUpgrade::Outcome::kFailed);
  CHECK(closed.failure.httpStatus == 503);
  CHECK(closed.failure.tag.empty());  // the body was cut short: not JSON
}
