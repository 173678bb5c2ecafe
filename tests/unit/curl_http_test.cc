// common/curl_http against a real socket: a one-connection HTTP server on 127.0.0.1 that
// records the request and answers with canned bytes.
#include "common/curl_http.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

namespace {

using ot::http::CurlRequest;
using ot::http::performCurl;

// Accepts one connection, reads the request (head and a body of Content-Length bytes), writes
// `answer` and closes. The request text is available after join().
class OneShotServer {
 public:
  explicit OneShotServer(std::string answer) : answer_(std::move(answer)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listener_, 1) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~OneShotServer() {
    join();
    ::close(listener_);
  }
  // Wakes an accept that no client will complete (a cancelled exchange may never connect).
  void join() {
    if (!thread_.joinable()) return;
    ::shutdown(listener_, SHUT_RDWR);
    thread_.join();
  }
  [[nodiscard]] std::string url(const std::string& path = "/") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  [[nodiscard]] const std::string& request() const { return request_; }

 private:
  void serve() {
    const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) return;
    char buffer[4096];
    size_t wanted = std::string::npos;
    while (wanted == std::string::npos || request_.size() < wanted) {
      const ssize_t got = ::read(fd, buffer, sizeof buffer);
      if (got <= 0) break;
      request_.append(buffer, static_cast<size_t>(got));
      const size_t head_end = request_.find("\r\n\r\n");
      if (wanted == std::string::npos && head_end != std::string::npos) {
        size_t body = 0;
        const size_t field = request_.find("Content-Length: ");
        if (field != std::string::npos && field < head_end) {
          body = std::stoul(request_.substr(field + 16));
        }
        wanted = head_end + 4 + body;
      }
    }
    size_t sent = 0;
    while (sent < answer_.size()) {
      const ssize_t wrote = ::send(fd, answer_.data() + sent, answer_.size() - sent, MSG_NOSIGNAL);
      if (wrote <= 0) break;
      sent += static_cast<size_t>(wrote);
    }
    ::close(fd);
  }

  std::string answer_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::string request_;
};

}  // namespace

TEST_CASE("curl http: the final answer's status, body and headers, names in lower case") {
  OneShotServer server(
      "HTTP/1.1 100 Continue\r\nRetry-After: 99\r\n\r\n"
      "HTTP/1.1 503 Service Unavailable\r\nRetry-After:  7 \r\nX-Thing: a\r\n"
      "Content-Length: 5\r\nConnection: close\r\n\r\nhello");
  CurlRequest request;
  request.url = server.url("/path?q=1");
  request.user_agent = "ot-test/1";
  request.headers = {"Accept: application/json"};
  auto reply = performCurl(request);
  REQUIRE_MESSAGE(reply.ok(), (reply.ok() ? "" : reply.error().message));
  CHECK(reply->status == 503);
  CHECK(reply->body == "hello");
  CHECK(reply->header("retry-after") == "7");  // the interim answer's header is dropped
  CHECK(reply->header("x-thing") == "a");
  CHECK(reply->header("absent").empty());
  server.join();
  CHECK(server.request().starts_with("GET /path?q=1 HTTP/1.1\r\n"));
  CHECK(server.request().find("User-Agent: ot-test/1\r\n") != std::string::npos);
  CHECK(server.request().find("Accept: application/json\r\n") != std::string::npos);
}

TEST_CASE("curl http: POST and PUT send their body without waiting for 100 Continue") {
  for (const char* method : {"POST", "PUT"}) {
    CAPTURE(method);
    OneShotServer server("HTTP/1.1 201 Created\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    CurlRequest request;
    request.method = method;
    request.url = server.url("/things");
    request.body = std::string(2000, 'x');  // over curl's threshold for Expect: 100-continue
    auto reply = performCurl(request);
    REQUIRE(reply.ok());
    CHECK(reply->status == 201);
    server.join();
    CHECK(server.request().starts_with(std::string(method) + " /things HTTP/1.1\r\n"));
    CHECK(server.request().find("Expect:") == std::string::npos);
    CHECK(server.request().ends_with("\r\n\r\n" + std::string(2000, 'x')));
  }
}

TEST_CASE("curl http: an answer over the body limit fails the exchange") {
  OneShotServer server("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n" +
                       std::string(100, 'y'));
  CurlRequest request;
  request.url = server.url();
  request.max_body_bytes = 64;
  auto reply = performCurl(request);
  REQUIRE_FALSE(reply.ok());
  CHECK(reply.error().kind == ot::ErrorKind::kUnavailable);
  CHECK(reply.error().message == "the answer is larger than 64 bytes");
}

TEST_CASE("curl http: a raised cancel flag ends the exchange") {
  // The server never answers; without the cancel the exchange would wait for its timeout.
  OneShotServer server("");
  const std::atomic<bool> cancel{true};
  CurlRequest request;
  request.url = server.url();
  request.cancel = &cancel;
  request.total_timeout_ms = 60'000;
  auto reply = performCurl(request);
  REQUIRE_FALSE(reply.ok());
  CHECK(reply.error().message == "cancelled");
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

TEST_CASE("curl http: a server that never answers is a timeout, a refused connection is not") {
  const BoundSocket silent(/*listening=*/true);
  CurlRequest request;
  request.url = silent.url;
  request.total_timeout_ms = 300;
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
