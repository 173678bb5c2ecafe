// The 502 answer otunnel gives visitors of an unreachable local service.
#include "client/local_unreachable.h"

#include <doctest/doctest.h>

#include <string>

using ot::client::badGatewayResponse;

TEST_CASE("local unreachable: a complete HTTP/1.1 502 whose length matches its body") {
  const std::string response = badGatewayResponse({"127.0.0.1", 3000}, "connection refused");
  CHECK(response.rfind("HTTP/1.1 502 Bad Gateway\r\n", 0) == 0);
  const size_t headEnd = response.find("\r\n\r\n");
  REQUIRE(headEnd != std::string::npos);
  const std::string head = response.substr(0, headEnd + 2);
  const std::string body = response.substr(headEnd + 4);
  CHECK(head.find("Content-Length: " + std::to_string(body.size()) + "\r\n") != std::string::npos);
  CHECK(head.find("Connection: close\r\n") != std::string::npos);
  CHECK(head.find("Content-Type: text/plain; charset=utf-8\r\n") != std::string::npos);
  CHECK(body.find("127.0.0.1:3000 (connection refused)") != std::string::npos);
  CHECK(body.back() == '\n');
}

TEST_CASE("local unreachable: IPv6 addresses are bracketed") {
  const std::string response = badGatewayResponse({"::1", 8080}, "connection refused");
  CHECK(response.find("[::1]:8080 (connection refused)") != std::string::npos);
}
