#include "common/bridge_control.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

using namespace ot::bridge;

AttachRequest parsed(std::string_view text) {
  auto result = parseClientMessage(text);
  if (!result.ok()) FAIL("unexpected attach_error: ", result.error().message);
  return std::move(result).value();
}

AttachError refused(std::string_view text) {
  const auto result = parseClientMessage(text);
  REQUIRE_FALSE(result.ok());
  CHECK_FALSE(result.error().message.empty());
  return result.error();
}

// {"type":"attach","token":"t",<extra>}
std::string attachWith(std::string_view extra) {
  std::string text = R"({"type":"attach","token":"t")";
  if (!extra.empty()) text += "," + std::string(extra);
  return text + "}";
}

std::string routeList(size_t count) {
  std::string list = "[";
  for (size_t i = 0; i < count; ++i) list += (i > 0 ? ",\"r" : "\"r") + std::to_string(i) + "\"";
  return list + "]";
}

void checkMalformed(std::string_view text) {
  CAPTURE(text);
  const auto error = refused(text);
  CHECK(error.code == AttachErrorCode::kError);
  CHECK(error.closeCode == 1002);
}

// Invalid routes are not refused by the parse: they wait in routeError until the token matched.
void checkInvalidRoute(std::string_view routes) {
  CAPTURE(routes);
  const auto attach = parsed(attachWith("\"routes\":" + std::string(routes)));
  CHECK_FALSE(attach.routeError.empty());
  CHECK(attach.routes.empty());
}

}  // namespace

TEST_CASE("bridge control: a minimal attach gets the defaults") {
  const auto attach = parsed(R"({"type":"attach","token":"tok_123"})");
  CHECK(attach.token == "tok_123");
  CHECK(attach.routes == std::vector<std::string>{""});
  CHECK(attach.maxConns == 256);
  CHECK(attach.window == 524288);
  CHECK(attach.origin.empty());
  CHECK(attach.profile.empty());
}

TEST_CASE("bridge control: a full attach") {
  const auto attach = parsed(R"({"type":"attach","token":"abc","routes":["","api"],"max_conns":64,)"
                             R"("origin":"home-1","profile":"Main_443.v2","window":1048576})");
  CHECK(attach.token == "abc");
  CHECK(attach.routes == std::vector<std::string>{"", "api"});
  CHECK(attach.maxConns == 64);
  CHECK(attach.origin == "home-1");
  CHECK(attach.profile == "Main_443.v2");
  CHECK(attach.window == 1048576);
}

TEST_CASE("bridge control: 129 routes are too many, before the token or anything else") {
  const auto withoutToken = refused(R"({"routes":)" + routeList(129) + "}");
  CHECK(withoutToken.code == AttachErrorCode::kTooManyRoutes);
  CHECK(withoutToken.closeCode == 1008);
  CHECK(refused(R"({"type":"nope","token":5,"routes":)" + routeList(129) + "}").code ==
        AttachErrorCode::kTooManyRoutes);
  // Counted before validation: invalid entries and duplicates still count.
  std::string junk = "[";
  for (int i = 0; i < 129; ++i) junk += i > 0 ? ",1" : "1";
  CHECK(refused(attachWith("\"routes\":" + junk + "]")).code == AttachErrorCode::kTooManyRoutes);
  std::string same = "[";
  for (int i = 0; i < 129; ++i) same += i > 0 ? ",\"a\"" : "\"a\"";
  CHECK(refused(attachWith("\"routes\":" + same + "]")).code == AttachErrorCode::kTooManyRoutes);

  const auto exactly = parsed(attachWith("\"routes\":" + routeList(128)));
  CHECK(exactly.routes.size() == 128);
  CHECK(exactly.routes.back() == "r127");
}

TEST_CASE("bridge control: routes are lowercased and deduplicated, first occurrence kept") {
  const auto attach = parsed(attachWith(R"("routes":["api","API","","Www","api","","www","a-1"])"));
  CHECK(attach.routes == std::vector<std::string>{"api", "", "www", "a-1"});
  CHECK(parsed(attachWith(R"("routes":null)")).routes == std::vector<std::string>{""});
  const std::string longest(63, 'Z');
  CHECK(parsed(attachWith("\"routes\":[\"" + longest + "\"]")).routes ==
        std::vector<std::string>{std::string(63, 'z')});
}

TEST_CASE("bridge control: invalid routes") {
  checkInvalidRoute("[]");
  checkInvalidRoute(R"(["-api"])");
  checkInvalidRoute(R"(["api-"])");
  checkInvalidRoute(R"(["a.b"])");
  checkInvalidRoute(R"(["a_b"])");
  checkInvalidRoute(R"(["a b"])");
  checkInvalidRoute(R"(["caf\u00e9"])");
  checkInvalidRoute(R"(["a\u0000"])");
  checkInvalidRoute("[\"" + std::string(64, 'a') + "\"]");
  checkInvalidRoute("[\"" + std::string(60000, 'a') + "\"]");
  checkInvalidRoute(R"(["api",5])");
  checkInvalidRoute(R"(["api",null])");
  checkInvalidRoute(R"([["api"]])");
  const auto attach = parsed(attachWith(R"("routes":["ok","ok2","bad.route"])"));
  CHECK(attach.routeError.find("routes[2]") != std::string::npos);
  CHECK(parsed(attachWith(R"("routes":["ok"])")).routeError.empty());
}

TEST_CASE("bridge control: token syntax") {
  CHECK(parsed(attachWith("")).token == "t");
  const std::string longest(512, 'k');
  CHECK(parsed(R"({"type":"attach","token":")" + longest + "\"}").token == longest);
  for (const std::string& bad : {std::string(513, 'k'), std::string(), std::string("a b"),
                                 std::string("caf\\u00e9"), std::string("a\\u007f")}) {
    CAPTURE(bad);
    const auto error = refused(R"({"type":"attach","token":")" + bad + "\"}");
    CHECK(error.code == AttachErrorCode::kBadToken);
    CHECK(error.closeCode == 1008);
  }
}

TEST_CASE("bridge control: max_conns, window, origin and profile limits") {
  CHECK(parsed(attachWith(R"("max_conns":1)")).maxConns == 1);
  CHECK(parsed(attachWith(R"("max_conns":256)")).maxConns == 256);
  CHECK(parsed(attachWith(R"("max_conns":257)")).maxConns == 256);
  CHECK(parsed(attachWith(R"("max_conns":18446744073709551615)")).maxConns == 256);
  checkMalformed(attachWith(R"("max_conns":0)"));
  checkMalformed(attachWith(R"("max_conns":-1)"));
  checkMalformed(attachWith(R"("max_conns":1.5)"));
  checkMalformed(attachWith(R"("max_conns":16.0)"));
  checkMalformed(attachWith(R"("max_conns":"16")"));
  checkMalformed(attachWith(R"("max_conns":1e400)"));

  CHECK(parsed(attachWith(R"("window":65536)")).window == 65536);
  CHECK(parsed(attachWith(R"("window":16777216)")).window == 16777216);
  checkMalformed(attachWith(R"("window":65535)"));
  checkMalformed(attachWith(R"("window":16777217)"));
  checkMalformed(attachWith(R"("window":true)"));
  checkMalformed(attachWith(R"("window":-524288)"));

  const std::string longest(64, 'o');
  CHECK(parsed(attachWith("\"origin\":\"" + longest + "\"")).origin == longest);
  CHECK(parsed(attachWith(R"("origin":"","profile":null)")).origin.empty());
  checkMalformed(attachWith("\"origin\":\"" + longest + "o\""));
  checkMalformed(attachWith(R"("origin":"a b")"));
  checkMalformed(attachWith(R"("origin":5)"));
  checkMalformed(attachWith(R"("profile":"p/1")"));
  checkMalformed(attachWith(R"("profile":["p"])"));

  CHECK(parsed(attachWith(R"("profile_index":0)")).profileIndex == 0);
  CHECK(parsed(attachWith(R"("profile_index":7)")).profileIndex == 7);
  CHECK(parsed(attachWith(R"("profile_index":null)")).profileIndex == 0);
  checkMalformed(attachWith(R"("profile_index":8)"));
  checkMalformed(attachWith(R"("profile_index":-1)"));
  checkMalformed(attachWith(R"("profile_index":"1")"));
}

TEST_CASE("bridge control: not JSON, not an object, wrong types") {
  for (const std::string_view text :
       {"", " ", "{", "attach", "{\"type\":\"attach\",}", "\xFF", "{\"type\":\"attach\"} x"}) {
    checkMalformed(text);
  }
  for (const std::string_view text : {"[]", "42", "\"attach\"", "null", "true"}) {
    checkMalformed(text);
  }
  checkMalformed(R"({"token":"t"})");
  checkMalformed(R"({"type":5,"token":"t"})");
  checkMalformed(R"({"type":"attached","token":"t"})");
  checkMalformed(R"({"type":"ATTACH","token":"t"})");
  checkMalformed(R"({"type":"attach"})");
  checkMalformed(R"({"type":"attach","token":null})");
  checkMalformed(R"({"type":"attach","token":123})");
  checkMalformed(R"({"type":"attach","token":["t"]})");
  checkMalformed(attachWith(R"("routes":"api")"));
  checkMalformed(attachWith(R"("routes":{"api":true})"));
}

TEST_CASE("bridge control: unknown fields are ignored") {
  const auto attach =
      parsed(R"({"future":{"x":[1,2,{"y":null}]},"type":"attach","v":2,"token":"t","z":1.5})");
  CHECK(attach.token == "t");
  CHECK(attach.routes == std::vector<std::string>{""});
}

TEST_CASE("bridge control: checks run in the documented order") {
  // Malformed fields before routes; the token before routes (a token guesser learns nothing of
  // the route rules, and a bad route with a bad token is a failed attach).
  CHECK(refused(attachWith(R"("max_conns":0,"routes":["a.b"])")).code == AttachErrorCode::kError);
  CHECK(refused(R"({"type":"attach","token":"","routes":["a.b"]})").code ==
        AttachErrorCode::kBadToken);
  CHECK(refused(R"({"type":"attach","token":"a b","routes":[7]})").code ==
        AttachErrorCode::kBadToken);
  CHECK(refused(R"({"type":"attach","token":"","routes":["ok"]})").code ==
        AttachErrorCode::kBadToken);
}

TEST_CASE("bridge control: deep nesting is refused without a crash") {
  const std::string deep = std::string(20000, '[') + std::string(20000, ']');
  checkMalformed(deep);
  CHECK(parsed(attachWith("\"x\":" + deep)).token == "t");
  checkMalformed(std::string(60000, '{'));
}

TEST_CASE("bridge control: serializers write exact JSON") {
  Attached attached;
  attached.bridgeId = "br_1";
  attached.limits.maxConns = 64;
  CHECK(serializeAttached(attached) ==
        R"({"type":"attached","bridge_id":"br_1","limits":{"max_conns":64,"max_payload":32768,)"
        R"("window":524288},"heartbeat_ms":15000})");
  CHECK(serializeAttachError({AttachErrorCode::kRouteConflict, "route \"api\" is taken", 1008}) ==
        R"({"type":"attach_error","code":"route_conflict","message":"route \"api\" is taken"})");
  CHECK(serializeDrain() == R"({"type":"drain"})");

  AttachRequest attach;
  attach.token = "t";
  attach.routes = {"", "api"};
  CHECK(serializeAttach(attach) ==
        R"({"type":"attach","token":"t","routes":["","api"],"max_conns":256,"window":524288})");
  attach.origin = "o";
  attach.profile = "p";
  CHECK(serializeAttach(attach) ==
        R"({"type":"attach","token":"t","routes":["","api"],)"
        R"("max_conns":256,"origin":"o","profile":"p","window":524288})");
  attach.profileIndex = 3;
  CHECK(serializeAttach(attach) ==
        R"({"type":"attach","token":"t","routes":["","api"],)"
        R"("max_conns":256,"origin":"o","profile":"p","profile_index":3,"window":524288})");
  attached.protocol = kBridgeProtocolVersion;
  CHECK(serializeAttached(attached) ==
        R"({"type":"attached","bridge_id":"br_1","limits":{"max_conns":64,"max_payload":32768,)"
        R"("window":524288},"heartbeat_ms":15000,"protocol":2})");
}

TEST_CASE("bridge control: serializing text that is not UTF-8 replaces it instead of throwing") {
  const std::string text = serializeAttachError({AttachErrorCode::kError, "bad \xFF byte", 1011});
  CHECK(text ==
        "{\"type\":\"attach_error\",\"code\":\"error\",\"message\":\"bad \xEF\xBF\xBD byte\"}");
  const auto back = parseRelayMessage(text);
  REQUIRE(back.ok());
  CHECK(std::get<AttachError>(back.value()).message == "bad \xEF\xBF\xBD byte");
}

TEST_CASE("bridge control: attach round trips through serializeAttach") {
  AttachRequest attach;
  attach.token = "secret-token";
  attach.routes = {"api", "", "x-1"};
  attach.maxConns = 17;
  attach.origin = "laptop";
  attach.profile = "tls443";
  attach.profileIndex = 5;
  attach.window = kMinWindow;
  CHECK(parsed(serializeAttach(attach)) == attach);
}

TEST_CASE("bridge control: error codes, names and close codes") {
  CHECK(attachErrorCodeName(AttachErrorCode::kBadToken) == "bad_token");
  CHECK(attachErrorCodeName(AttachErrorCode::kCertNotReady) == "cert_not_ready");
  CHECK(attachErrorCodeName(AttachErrorCode::kInvalidRoute) == "invalid_route");
  CHECK(attachErrorCodeName(AttachErrorCode::kTooManyRoutes) == "too_many_routes");
  CHECK(attachErrorCodeName(AttachErrorCode::kRouteConflict) == "route_conflict");
  CHECK(attachErrorCodeName(AttachErrorCode::kTooManyFailures) == "too_many_failures");
  CHECK(attachErrorCodeName(AttachErrorCode::kTooManyBridges) == "too_many_bridges");
  CHECK(attachErrorCodeName(AttachErrorCode::kError) == "error");
  CHECK(closeCodeFor(AttachErrorCode::kTooManyFailures) == 1008);
  CHECK(closeCodeFor(AttachErrorCode::kTooManyBridges) == 1008);
  CHECK(closeCodeFor(AttachErrorCode::kBadToken) == 1008);
  CHECK(closeCodeFor(AttachErrorCode::kCertNotReady) == 1008);
  CHECK(closeCodeFor(AttachErrorCode::kRouteConflict) == 1008);
  CHECK(closeCodeFor(AttachErrorCode::kError) == 1011);
}

TEST_CASE("bridge control: the client parses what the relay sends") {
  Attached attached;
  attached.bridgeId = "b-42";
  attached.limits = {100, 16384, kMaxWindow};
  attached.heartbeatMs = 20000;
  const auto back = parseRelayMessage(serializeAttached(attached));
  REQUIRE(back.ok());
  CHECK(std::get<Attached>(back.value()) == attached);
  CHECK(std::get<Attached>(back.value()).protocol == 1);  // a relay from before pools sends none
  attached.protocol = 2;
  const auto pooled = parseRelayMessage(serializeAttached(attached));
  REQUIRE(pooled.ok());
  CHECK(std::get<Attached>(pooled.value()).protocol == 2);
  CHECK_FALSE(parseRelayMessage(R"({"type":"attached","bridge_id":"b","limits":{"max_conns":1,)"
                                R"("max_payload":1,"window":65536},"heartbeat_ms":1000,)"
                                R"("protocol":"2"})")
                  .ok());

  for (const auto code : {AttachErrorCode::kBadToken, AttachErrorCode::kCertNotReady,
                          AttachErrorCode::kInvalidRoute, AttachErrorCode::kTooManyRoutes,
                          AttachErrorCode::kRouteConflict, AttachErrorCode::kTooManyFailures,
                          AttachErrorCode::kTooManyBridges, AttachErrorCode::kError}) {
    const auto error = parseRelayMessage(serializeAttachError({code, "why", 1008}));
    REQUIRE(error.ok());
    const auto& parsedError = std::get<AttachError>(error.value());
    CHECK(parsedError.code == code);
    CHECK(parsedError.message == "why");
    CHECK(parsedError.closeCode == closeCodeFor(code));
  }
  const auto unknownCode = parseRelayMessage(R"({"type":"attach_error","code":"rate_limited"})");
  REQUIRE(unknownCode.ok());
  CHECK(std::get<AttachError>(unknownCode.value()).code == AttachErrorCode::kError);
  CHECK(std::get<AttachError>(unknownCode.value()).message.empty());

  const auto drain = parseRelayMessage(R"({"type":"drain","after_ms":5000})");
  REQUIRE(drain.ok());
  CHECK(std::holds_alternative<Drain>(drain.value()));
}

TEST_CASE("bridge control: relay messages the client refuses or ignores") {
  const auto errorOf = [](std::string_view text) {
    CAPTURE(text);
    const auto result = parseRelayMessage(text);
    REQUIRE_FALSE(result.ok());
    return result.error();
  };
  CHECK(errorOf("nope") == RelayMessageError::kNotJson);
  CHECK(errorOf("[1]") == RelayMessageError::kNotObject);
  CHECK(errorOf(R"({"type":"welcome"})") == RelayMessageError::kUnknownType);
  CHECK(errorOf(R"({"kind":"drain"})") == RelayMessageError::kBadField);
  CHECK(errorOf(R"({"type":"attach_error"})") == RelayMessageError::kBadField);
  CHECK(errorOf(R"({"type":"attach_error","code":"error","message":5})") ==
        RelayMessageError::kBadField);
  const std::string good =
      R"("limits":{"max_conns":1,"max_payload":32768,"window":65536},"heartbeat_ms":1000)";
  CHECK(parseRelayMessage(R"({"type":"attached","bridge_id":"b",)" + good + "}").ok());
  for (const std::string& bad : {
           std::string(R"({"type":"attached",)") + good + "}",
           std::string(R"({"type":"attached","bridge_id":"",)") + good + "}",
           std::string(R"({"type":"attached","bridge_id":"b","heartbeat_ms":15000})"),
           std::string(R"({"type":"attached","bridge_id":"b","limits":{"max_conns":0,)"
                       R"("max_payload":32768,"window":65536},"heartbeat_ms":15000})"),
           std::string(R"({"type":"attached","bridge_id":"b","limits":{"max_conns":1,)"
                       R"("max_payload":32769,"window":65536},"heartbeat_ms":15000})"),
           std::string(R"({"type":"attached","bridge_id":"b","limits":{"max_conns":1,)"
                       R"("max_payload":32768,"window":65535},"heartbeat_ms":15000})"),
           std::string(R"({"type":"attached","bridge_id":"b","limits":{"max_conns":1,)"
                       R"("max_payload":32768,"window":65536},"heartbeat_ms":999})"),
       }) {
    CHECK(errorOf(bad) == RelayMessageError::kBadField);
  }
  CHECK(relayMessageErrorName(RelayMessageError::kUnknownType) == "unknown_type");
}
