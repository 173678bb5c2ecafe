// The WebSocket opening handshake (RFC 6455 section 4): accept keys, upgrade request checks with
// their HTTP statuses, the 101 response, the client request and the client's response check.
#include "common/websocket_handshake.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using ot::ws::HttpHeader;
using ot::ws::ResponseError;
using ot::ws::UpgradeError;
using Headers = std::vector<HttpHeader>;

constexpr std::string_view kSampleKey = "dGhlIHNhbXBsZSBub25jZQ==";
constexpr std::string_view kSampleAccept = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

Headers goodRequestHeaders() {
  return {
      {"Host", "api.example.test"},      {"Upgrade", "websocket"},        {"Connection", "Upgrade"},
      {"Sec-WebSocket-Key", kSampleKey}, {"Sec-WebSocket-Version", "13"},
  };
}

Headers without(Headers headers, std::string_view name) {
  std::erase_if(headers, [name](const HttpHeader& h) { return h.name == name; });
  return headers;
}

Headers with(Headers headers, std::string_view name, std::string_view value) {
  headers = without(std::move(headers), name);
  headers.push_back({name, value});
  return headers;
}

UpgradeError check(const Headers& headers, std::string_view method = "GET", int major = 1,
                   int minor = 1) {
  return ot::ws::checkUpgradeRequest({method, major, minor, headers}).error;
}

Headers goodResponseHeaders() {
  return {
      {"Upgrade", "websocket"},
      {"Connection", "Upgrade"},
      {"Sec-WebSocket-Accept", kSampleAccept},
  };
}

}  // namespace

TEST_CASE("websocket handshake: RFC 6455 1.3 accept key") {
  CHECK(ot::ws::acceptKey(kSampleKey) == kSampleAccept);
  CHECK(ot::ws::acceptKey("x3JJHMbDL1EzLkh9GBhXDw==") == "HSmrc0sMlYUkAGmm5OPpG2HaGWk=");
}

TEST_CASE("websocket handshake: client keys must be base64 of 16 bytes") {
  CHECK(ot::ws::isValidClientKey(kSampleKey));
  CHECK(ot::ws::isValidClientKey("AAAAAAAAAAAAAAAAAAAAAA=="));
  CHECK(ot::ws::isValidClientKey("/////////////////////w=="));
  CHECK_FALSE(ot::ws::isValidClientKey(""));
  CHECK_FALSE(ot::ws::isValidClientKey("dGhlIHNhbXBsZSBub25jZQ="));    // 23 chars
  CHECK_FALSE(ot::ws::isValidClientKey("dGhlIHNhbXBsZSBub25jZQ==="));  // 25 chars
  CHECK_FALSE(ot::ws::isValidClientKey("dGhlIHNhbXBsZSBub25jZQAA"));   // no padding
  CHECK_FALSE(ot::ws::isValidClientKey("dGhlIHNhbXBsZSBub25jZR=="));   // non-canonical last char
  CHECK_FALSE(ot::ws::isValidClientKey("dGhlIHNhbXBsZSBub25j*Q=="));   // outside the alphabet
  CHECK_FALSE(ot::ws::isValidClientKey("dGhlIHNhbXBsZSBub25jZQ-_"));   // base64url padding
  CHECK_FALSE(ot::ws::isValidClientKey("dGhlIHNhbXBsZSBub25jZSBhIGxvbmcgb25l"));  // 27 bytes
}

TEST_CASE("websocket handshake: a valid upgrade request") {
  const Headers headers = goodRequestHeaders();
  const auto result = ot::ws::checkUpgradeRequest({"GET", 1, 1, headers});
  CHECK(result.error == UpgradeError::kNone);
  CHECK(result.key == kSampleKey);
  CHECK(ot::ws::httpStatusFor(result.error) == 101);

  // Names and tokens are case-insensitive, Connection is a list, values may carry spaces, and
  // headers repeated in pieces still count.
  const Headers loose = {
      {"host", "api.example.test"},
      {"UPGRADE", " WebSocket "},
      {"connection", "keep-alive"},
      {"Connection", "  keep-alive ,UPGRADE\t"},
      {"sec-websocket-key", "\tdGhlIHNhbXBsZSBub25jZQ== "},
      {"Sec-Websocket-Version", " 13"},
      {"Sec-WebSocket-Extensions", "permessage-deflate"},
  };
  const auto looseResult = ot::ws::checkUpgradeRequest({"GET", 1, 1, loose});
  CHECK(looseResult.error == UpgradeError::kNone);
  CHECK(looseResult.key == kSampleKey);
  CHECK(check(with(goodRequestHeaders(), "Upgrade", "h2c, websocket")) == UpgradeError::kNone);
  CHECK(check(goodRequestHeaders(), "GET", 2, 0) == UpgradeError::kNone);
}

TEST_CASE("websocket handshake: each missing or wrong part of a request") {
  struct Case {
    const char* name;
    UpgradeError error;
    int status;
  };
  const Headers good = goodRequestHeaders();
  auto run = [](const Case& c, const Headers& headers, std::string_view method = "GET",
                int major = 1, int minor = 1) {
    CAPTURE(c.name);
    const auto result = ot::ws::checkUpgradeRequest({method, major, minor, headers});
    CHECK(result.error == c.error);
    CHECK(result.key.empty());
    CHECK(ot::ws::httpStatusFor(result.error) == c.status);
    CHECK(ot::ws::upgradeErrorName(result.error) != "unknown");
    CHECK(!ot::ws::upgradeErrorMessage(result.error).empty());
  };
  run({"POST", UpgradeError::kMethodNotGet, 400}, good, "POST");
  run({"lower-case get", UpgradeError::kMethodNotGet, 400}, good, "get");
  run({"HTTP/1.0", UpgradeError::kHttpVersion, 400}, good, "GET", 1, 0);
  run({"HTTP/0.9", UpgradeError::kHttpVersion, 400}, good, "GET", 0, 9);
  run({"no Upgrade", UpgradeError::kNotWebSocket, 426}, without(good, "Upgrade"));
  run({"Upgrade h2c", UpgradeError::kNotWebSocket, 426}, with(good, "Upgrade", "h2c"));
  run({"Upgrade websockets", UpgradeError::kNotWebSocket, 426},
      with(good, "Upgrade", "websockets"));
  run({"no Connection", UpgradeError::kConnectionNotUpgrade, 400}, without(good, "Connection"));
  run({"Connection keep-alive", UpgradeError::kConnectionNotUpgrade, 400},
      with(good, "Connection", "keep-alive"));
  run({"Connection upgraded", UpgradeError::kConnectionNotUpgrade, 400},
      with(good, "Connection", "upgraded, close"));
  run({"no version", UpgradeError::kVersionMissing, 400}, without(good, "Sec-WebSocket-Version"));
  run({"version 8", UpgradeError::kVersionUnsupported, 426},
      with(good, "Sec-WebSocket-Version", "8"));
  run({"version 13, 8", UpgradeError::kVersionUnsupported, 426},
      with(good, "Sec-WebSocket-Version", "13, 8"));
  Headers twoVersions = good;
  twoVersions.push_back({"Sec-WebSocket-Version", "13"});
  run({"version twice", UpgradeError::kVersionUnsupported, 426}, twoVersions);
  run({"no key", UpgradeError::kKeyMissing, 400}, without(good, "Sec-WebSocket-Key"));
  run({"empty key", UpgradeError::kKeyInvalid, 400}, with(good, "Sec-WebSocket-Key", ""));
  run({"short key", UpgradeError::kKeyInvalid, 400},
      with(good, "Sec-WebSocket-Key", "dGhlIHNhbXBsZQ=="));
  run({"non-base64 key", UpgradeError::kKeyInvalid, 400},
      with(good, "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25j!Q=="));
  Headers twoKeys = good;
  twoKeys.push_back({"Sec-WebSocket-Key", kSampleKey});
  run({"key twice", UpgradeError::kKeyInvalid, 400}, twoKeys);
}

TEST_CASE("websocket handshake: the 101 response") {
  CHECK(ot::ws::buildUpgradeResponse(kSampleKey) ==
        "HTTP/1.1 101 Switching Protocols\r\n"
        "Upgrade: websocket\r\n"
        "Connection: Upgrade\r\n"
        "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
        "\r\n");
}

TEST_CASE("websocket handshake: the client request") {
  const std::string_view sample = "the sample nonce";
  std::array<uint8_t, 16> nonce{};
  std::copy(sample.begin(), sample.end(), nonce.begin());
  const Headers extra = {{"User-Agent", "otunnel/1.0"}};
  const auto handshake =
      ot::ws::buildClientRequest("abc.tunnel.test", "/api/tunnel/abc/bridge", nonce, extra);
  REQUIRE(handshake.has_value());
  CHECK(handshake->key == kSampleKey);
  CHECK(handshake->request ==
        "GET /api/tunnel/abc/bridge HTTP/1.1\r\n"
        "Host: abc.tunnel.test\r\n"
        "Upgrade: websocket\r\n"
        "Connection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n"
        "User-Agent: otunnel/1.0\r\n"
        "\r\n");
  CHECK(ot::ws::isValidClientKey(handshake->key));

  const std::array<uint8_t, 16> zeros{};
  CHECK(ot::ws::buildClientRequest("h", "/", zeros)->key == "AAAAAAAAAAAAAAAAAAAAAA==");

  using namespace std::string_view_literals;
  CHECK_FALSE(ot::ws::buildClientRequest("", "/", nonce).has_value());
  CHECK_FALSE(ot::ws::buildClientRequest("h\r\nX: y", "/", nonce).has_value());
  CHECK_FALSE(ot::ws::buildClientRequest("h", "", nonce).has_value());
  CHECK_FALSE(ot::ws::buildClientRequest("h", "bridge", nonce).has_value());
  CHECK_FALSE(ot::ws::buildClientRequest("h", "/a b", nonce).has_value());
  CHECK_FALSE(ot::ws::buildClientRequest("h", "/a\nb", nonce).has_value());
  CHECK_FALSE(ot::ws::buildClientRequest("h", "/a\0b"sv, nonce).has_value());
  const Headers badValue = {{"X-Token", "a\r\nInjected: 1"}};
  CHECK_FALSE(ot::ws::buildClientRequest("h", "/", nonce, badValue).has_value());
  const Headers badName = {{"X Token", "a"}};
  CHECK_FALSE(ot::ws::buildClientRequest("h", "/", nonce, badName).has_value());
  const Headers emptyName = {{"", "a"}};
  CHECK_FALSE(ot::ws::buildClientRequest("h", "/", nonce, emptyName).has_value());
}

TEST_CASE("websocket handshake: the client checks the 101 response") {
  const Headers good = goodResponseHeaders();
  CHECK(ot::ws::checkUpgradeResponse(101, good, kSampleKey) == ResponseError::kNone);
  const Headers loose = {{"upgrade", "WebSocket"},
                         {"connection", "keep-alive, upgrade"},
                         {"sec-websocket-accept", " s3pPLMBiTxaQ9kYGzzhZRbK+xOo= "}};
  CHECK(ot::ws::checkUpgradeResponse(101, loose, kSampleKey) == ResponseError::kNone);

  struct Case {
    const char* name;
    int status;
    Headers headers;
    ResponseError error;
  };
  Headers twoAccepts = good;
  twoAccepts.push_back({"Sec-WebSocket-Accept", kSampleAccept});
  const std::vector<Case> cases = {
      {"200", 200, good, ResponseError::kNotSwitchingProtocols},
      {"426", 426, good, ResponseError::kNotSwitchingProtocols},
      {"no Upgrade", 101, without(good, "Upgrade"), ResponseError::kNotWebSocket},
      {"Upgrade h2c", 101, with(good, "Upgrade", "h2c"), ResponseError::kNotWebSocket},
      {"no Connection", 101, without(good, "Connection"), ResponseError::kConnectionNotUpgrade},
      {"no accept", 101, without(good, "Sec-WebSocket-Accept"), ResponseError::kAcceptMismatch},
      {"wrong accept", 101, with(good, "Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo"),
       ResponseError::kAcceptMismatch},
      {"accept twice", 101, twoAccepts, ResponseError::kAcceptMismatch},
      {"extension", 101, with(good, "Sec-WebSocket-Extensions", "permessage-deflate"),
       ResponseError::kUnexpectedExtension},
      {"protocol", 101, with(good, "Sec-WebSocket-Protocol", "chat"),
       ResponseError::kUnexpectedProtocol},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CHECK(ot::ws::checkUpgradeResponse(c.status, c.headers, kSampleKey) == c.error);
    CHECK(ot::ws::responseErrorName(c.error) != "unknown");
  }
  // The accept key answers one particular request key.
  CHECK(ot::ws::checkUpgradeResponse(101, good, "AAAAAAAAAAAAAAAAAAAAAA==") ==
        ResponseError::kAcceptMismatch);
}

TEST_CASE("websocket handshake: client request and server response agree") {
  std::array<uint8_t, 16> nonce{};
  for (size_t i = 0; i < nonce.size(); ++i) nonce[i] = static_cast<uint8_t>(0xF0 + i);
  const auto handshake = ot::ws::buildClientRequest("h", "/", nonce);
  REQUIRE(handshake.has_value());
  const Headers request = {{"Upgrade", "websocket"},
                           {"Connection", "Upgrade"},
                           {"Sec-WebSocket-Key", handshake->key},
                           {"Sec-WebSocket-Version", "13"}};
  const auto accepted = ot::ws::checkUpgradeRequest({"GET", 1, 1, request});
  REQUIRE(accepted.error == UpgradeError::kNone);
  const std::string accept = ot::ws::acceptKey(accepted.key);
  const Headers response = {
      {"Upgrade", "websocket"}, {"Connection", "Upgrade"}, {"Sec-WebSocket-Accept", accept}};
  CHECK(ot::ws::checkUpgradeResponse(101, response, handshake->key) == ResponseError::kNone);
  CHECK(ot::ws::buildUpgradeResponse(accepted.key).find(accept) != std::string::npos);
}
