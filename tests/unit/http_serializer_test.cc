#include "common/http_serializer.h"

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/http_parser.h"

namespace ot {
namespace {

std::span<const uint8_t> bytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

TEST_CASE("http serializer: request head with each framing") {
  const std::vector<HttpHeader> headers = {{"Host", "api.example.com"}, {"X-Request-Id", "42"}};
  CHECK(serializeRequestHead("GET", "/api/tunnels?x=1", headers, HttpFraming::none()) ==
        std::optional<std::string>("GET /api/tunnels?x=1 HTTP/1.1\r\nHost: api.example.com\r\n"
                                   "X-Request-Id: 42\r\n\r\n"));
  CHECK(
      serializeRequestHead("PUT", "/a", headers, HttpFraming::length(7)) ==
      std::optional<std::string>("PUT /a HTTP/1.1\r\nHost: api.example.com\r\nX-Request-Id: 42\r\n"
                                 "Content-Length: 7\r\n\r\n"));
  CHECK(serializeRequestHead("POST", "/a", {}, HttpFraming::chunked()) ==
        std::optional<std::string>("POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"));
}

TEST_CASE("http serializer: a peer's framing fields are replaced, never forwarded") {
  const std::vector<HttpHeader> headers = {{"Host", "a"},
                                           {"content-length", "999"},
                                           {"Transfer-Encoding", "chunked"},
                                           {"Accept", "*/*"}};
  CHECK(serializeRequest("POST", "/x", headers, "abc") ==
        std::optional<std::string>(
            "POST /x HTTP/1.1\r\nHost: a\r\nAccept: */*\r\nContent-Length: 3\r\n\r\nabc"));
  // Empty bodies: Content-Length: 0 only where the method defines content.
  CHECK(serializeRequest("GET", "/x", {}, "") ==
        std::optional<std::string>("GET /x HTTP/1.1\r\n\r\n"));
  CHECK(serializeRequest("POST", "/x", {}, "") ==
        std::optional<std::string>("POST /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n"));
}

TEST_CASE("http serializer: responses") {
  const std::vector<HttpHeader> json = {{"Content-Type", "application/json"}};
  CHECK(serializeResponse(404, "", json, "{}") ==
        std::optional<std::string>("HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
                                   "Content-Length: 2\r\n\r\n{}"));
  CHECK(serializeResponse(200, "Fine", {}, "") ==
        std::optional<std::string>("HTTP/1.1 200 Fine\r\nContent-Length: 0\r\n\r\n"));
  CHECK(serializeResponse(599, "", {}, "") ==
        std::optional<std::string>("HTTP/1.1 599 \r\nContent-Length: 0\r\n\r\n"));
  // No framing field on 1xx, 204 and 304, and no body either.
  CHECK(serializeResponse(204, "", {}, "") ==
        std::optional<std::string>("HTTP/1.1 204 No Content\r\n\r\n"));
  CHECK(
      serializeResponse(
          101, "", std::vector<HttpHeader>{{"Upgrade", "websocket"}, {"Connection", "Upgrade"}},
          "") ==
      std::optional<std::string>(
          "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"));
  CHECK_FALSE(serializeResponse(204, "", {}, "x").has_value());
  CHECK_FALSE(serializeResponse(304, "", {}, "x").has_value());
  CHECK_FALSE(serializeResponseHead(204, "", {}, HttpFraming::length(0)).has_value());
  CHECK_FALSE(serializeResponseHead(100, "", {}, HttpFraming::chunked()).has_value());
  CHECK(serializeResponseHead(200, "", {}, HttpFraming::chunked()) ==
        std::optional<std::string>("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"));
  CHECK(httpReasonPhrase(413) == "Content Too Large");
  CHECK(httpReasonPhrase(431) == "Request Header Fields Too Large");
  CHECK(httpReasonPhrase(299).empty());
}

TEST_CASE("http serializer: refuses anything that would inject or break a message") {
  const std::vector<HttpHeader> ok = {{"Host", "a"}};
  CHECK_FALSE(serializeRequestHead("G ET", "/", ok, {}).has_value());
  CHECK_FALSE(serializeRequestHead("", "/", ok, {}).has_value());
  CHECK_FALSE(serializeRequestHead("GET", "", ok, {}).has_value());
  CHECK_FALSE(serializeRequestHead("GET", "/a b", ok, {}).has_value());
  CHECK_FALSE(serializeRequestHead("GET", "/a\r\nX: y", ok, {}).has_value());
  CHECK_FALSE(serializeRequestHead("GET", "/caf\xc3\xa9", ok, {}).has_value());
  for (const HttpHeader& bad :
       {HttpHeader{"X", "a\r\nInjected: 1"}, HttpHeader{"X", "a\nb"},
        HttpHeader{"X", std::string("a\0b", 3)}, HttpHeader{"X", "a\x7f"}, HttpHeader{"X Y", "1"},
        HttpHeader{"", "1"}, HttpHeader{"X:", "1"}}) {
    CAPTURE(bad.name);
    CHECK_FALSE(serializeRequestHead("GET", "/", std::vector<HttpHeader>{bad}, {}).has_value());
    CHECK_FALSE(serializeResponse(200, "", std::vector<HttpHeader>{bad}, "").has_value());
  }
  CHECK(
      serializeRequestHead("GET", "/", std::vector<HttpHeader>{{"X", "tab\there caf\xc3\xa9"}}, {})
          .has_value());
  CHECK_FALSE(serializeResponseHead(200, "OK\r\nX: y", {}, {}).has_value());
  CHECK_FALSE(serializeResponseHead(99, "", {}, {}).has_value());
  CHECK_FALSE(serializeResponseHead(1000, "", {}, {}).has_value());
}

TEST_CASE("http serializer: chunks") {
  CHECK(serializeChunk(bytes("hello")) == "5\r\nhello\r\n");
  CHECK(serializeChunk(bytes(std::string(26, 'x'))) == "1a\r\n" + std::string(26, 'x') + "\r\n");
  CHECK(serializeChunk({}).empty());
  CHECK(kLastChunk == "0\r\n\r\n");
}

TEST_CASE("http serializer: what it writes parses back to the same message") {
  const std::vector<HttpHeader> headers = {{"Host", "api.example.com"},
                                           {"X-Forwarded-For", "192.0.2.1"},
                                           {"X-Forwarded-For", "198.51.100.7"}};
  auto request = serializeRequestHead("POST", "/api/tunnels", headers, HttpFraming::chunked());
  REQUIRE(request.has_value());
  *request +=
      serializeChunk(bytes("{\"a\":")) + serializeChunk(bytes("1}")) + std::string(kLastChunk);
  HttpParser parser(HttpParser::Kind::kRequest);
  const auto r = parser.feed(*request);
  CHECK(r.status == HttpParseStatus::kDone);
  CHECK(r.consumed == request->size());
  CHECK(parser.message().method == "POST");
  CHECK(parser.message().target == "/api/tunnels");
  CHECK(parser.message().body == "{\"a\":1}");
  REQUIRE(parser.message().headers.size() == 4);
  CHECK(std::vector<HttpHeader>(parser.message().headers.begin(),
                                parser.message().headers.begin() + 3) == headers);

  const auto response =
      serializeResponse(201, "", std::vector<HttpHeader>{{"Location", "/api/tunnels/x"}}, "{}");
  REQUIRE(response.has_value());
  HttpParser responses(HttpParser::Kind::kResponse);
  CHECK(responses.feed(*response).status == HttpParseStatus::kDone);
  CHECK(responses.message().status == 201);
  CHECK(responses.message().reason == "Created");
  CHECK(responses.message().body == "{}");
  CHECK(responses.message().keepAlive);
}

}  // namespace
}  // namespace ot
