// common/curl_http against real sockets: a canned HTTP server on 127.0.0.1 that records the
// requests, and bound sockets that never answer or refuse.
#include "common/curl_http.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "tests/unit/canned_http_server.h"

namespace {

using ot::http::CurlRequest;
using ot::http::performCurl;
using ot::testing::CannedServer;

std::string urlOf(const CannedServer& server, const std::string& path = "/") {
  return "http://127.0.0.1:" + std::to_string(server.port()) + path;
}

// A loopback socket bound to a port of its own; listening when asked (the kernel then completes
// handshakes that nobody accepts), else every connection to it is refused.
struct BoundSocket {
  explicit BoundSocket(bool listening) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    if (listening) REQUIRE(::listen(fd, 4) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    url = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port)) + "/";
  }
  ~BoundSocket() { ::close(fd); }
  int fd = -1;
  std::string url;
};

}  // namespace

TEST_CASE("curl http: the final answer's status, body and headers, names in lower case") {
  CannedServer server(
      {"HTTP/1.1 100 Continue\r\nRetry-After: 99\r\n\r\n"
       "HTTP/1.1 503 Service Unavailable\r\nRetry-After:  7 \r\nX-Thing: a\r\n"
       "Content-Length: 5\r\nConnection: close\r\n\r\nhello"});
  CurlRequest request;
  request.url = urlOf(server, "/path?q=1");
  request.userAgent = "ot-test/1";
  request.headers = {"Accept: application/json"};
  auto reply = performCurl(request);
  REQUIRE_MESSAGE(reply.ok(), (reply.ok() ? "" : reply.error().message));
  CHECK(reply->status == 503);
  CHECK(reply->body == "hello");
  CHECK(reply->header("retry-after") == "7");  // the interim answer's header is dropped
  CHECK(reply->header("x-thing") == "a");
  CHECK(reply->header("absent").empty());
  const std::vector<std::string> requests = server.requests();
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].starts_with("GET /path?q=1 HTTP/1.1\r\n"));
  CHECK(requests[0].find("User-Agent: ot-test/1\r\n") != std::string::npos);
  CHECK(requests[0].find("Accept: application/json\r\n") != std::string::npos);
}

TEST_CASE("curl http: POST and PUT send their body without waiting for 100 Continue") {
  for (const char* method : {"POST", "PUT"}) {
    CAPTURE(method);
    CannedServer server({ot::testing::answer(201, "")});
    CurlRequest request;
    request.method = method;
    request.url = urlOf(server, "/things");
    request.body = std::string(2000, 'x');  // over curl's threshold for Expect: 100-continue
    auto reply = performCurl(request);
    REQUIRE(reply.ok());
    CHECK(reply->status == 201);
    const std::vector<std::string> requests = server.requests();
    REQUIRE(requests.size() == 1);
    CHECK(requests[0].starts_with(std::string(method) + " /things HTTP/1.1\r\n"));
    CHECK(requests[0].find("Expect:") == std::string::npos);
    CHECK(requests[0].ends_with("\r\n\r\n" + std::string(2000, 'x')));
  }
}

TEST_CASE("curl http: an answer over the body limit fails the exchange") {
  CannedServer server({ot::testing::answer(200, std::string(100, 'y'))});
  CurlRequest request;
  request.url = urlOf(server);
  request.maxBodyBytes = 64;
  auto reply = performCurl(request);
  REQUIRE_FALSE(reply.ok());
  CHECK(reply.error().kind == ot::ErrorKind::kUnavailable);
  CHECK(reply.error().message == "the answer is larger than 64 bytes");
}

TEST_CASE("curl http: a raised cancel flag ends the exchange") {
  // The server never answers; without the cancel the exchange would wait for its timeout.
  const BoundSocket silent(/*listening=*/true);
  const std::atomic<bool> cancel{true};
  CurlRequest request;
  request.url = silent.url;
  request.cancel = &cancel;
  request.totalTimeoutMs = 60'000;
  auto reply = performCurl(request);
  REQUIRE_FALSE(reply.ok());
  CHECK(reply.error().message == "cancelled");
}

TEST_CASE("curl http: a server that never answers is a timeout, a refused connection is not") {
  const BoundSocket silent(/*listening=*/true);
  CurlRequest request;
  request.url = silent.url;
  request.totalTimeoutMs = 300;
  auto timedOut = performCurl(request);
  REQUIRE_FALSE(timedOut.ok());
  CHECK(timedOut.error().kind == ot::ErrorKind::kTimeout);

  const BoundSocket closed(/*listening=*/false);
  request.url = closed.url;
  auto refused = performCurl(request);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().kind == ot::ErrorKind::kUnavailable);
  CHECK_FALSE(refused.error().message.empty());
}

TEST_CASE("curl http: Retry-After in seconds and as an HTTP date") {
  using ot::http::parseRetryAfterMs;
  CHECK(parseRetryAfterMs("5", 0) == 5000);
  CHECK(parseRetryAfterMs(" 0 ", 0) == 0);
  CHECK(parseRetryAfterMs("99999999999", 0) == int64_t{999'999'999} * 1000);
  // 2030-01-01T00:00:10Z, seen ten seconds before, and after.
  CHECK(parseRetryAfterMs("Tue, 01 Jan 2030 00:00:10 GMT", 1893456000000) == 10000);
  CHECK(parseRetryAfterMs("Tue, 01 Jan 2030 00:00:10 GMT", 1893456020000) == 0);
  CHECK_FALSE(parseRetryAfterMs("soon", 0).has_value());
  CHECK_FALSE(parseRetryAfterMs("-1", 0).has_value());
  CHECK_FALSE(parseRetryAfterMs("", 0).has_value());
}

TEST_CASE("curl http: percent-encoding keeps only unreserved characters") {
  CHECK(ot::http::percentEncode("abc-_.~XYZ019") == "abc-_.~XYZ019");
  CHECK(ot::http::percentEncode("a b/c?d=e&f") == "a%20b%2Fc%3Fd%3De%26f");
  CHECK(ot::http::percentEncode("\xff") == "%FF");
}
