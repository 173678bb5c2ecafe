#include "relayd/plain_http_server.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/http_parser.h"
#include "tests/unit/loopback_sockets.h"

using ot::relayd::PlainHttpServer;
using ot::relayd::PlainRequest;
using ot::relayd::PlainResponse;

namespace {

bool sendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Everything until the server closes (or "<timeout>" appended if it does not within 5 s).
std::string readUntilClose(int fd) {
  std::string out;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n == 0) return out;
    if (n < 0) return out + "<timeout>";
    out.append(buffer, static_cast<size_t>(n));
  }
}

// Exactly one response (parsed to know where it ends), or "<error>".
std::string readOneResponse(int fd) {
  ot::HttpParser parser(ot::HttpParser::Kind::kResponse);
  std::string out;
  char byte = 0;
  // Byte by byte so that nothing of a following response is consumed.
  while (::recv(fd, &byte, 1, 0) == 1) {
    out.push_back(byte);
    const auto result = parser.feed(std::string_view(&byte, 1));
    if (result.status == ot::HttpParseStatus::kDone) return out;
    if (result.status == ot::HttpParseStatus::kError) return out + "<error>";
  }
  return out + "<error>";
}

// Runs the server on `loop` (this thread) while `client` runs on its own thread; when the client
// is done the server is destroyed on the loop thread and the loop drains.
void runWithClient(uv_loop_t* loop, std::unique_ptr<PlainHttpServer>& server,
                   const std::function<void()>& client) {
  uv_async_t done{};
  done.data = &server;
  uv_async_init(loop, &done, [](uv_async_t* handle) {
    static_cast<std::unique_ptr<PlainHttpServer>*>(handle->data)->reset();
    uv_close(reinterpret_cast<uv_handle_t*>(handle), nullptr);
  });
  std::thread thread([&] {
    client();
    uv_async_send(&done);
  });
  uv_run(loop, UV_RUN_DEFAULT);
  thread.join();
}

// What a health callback answers: 200 "ok" or 503 "unhealthy".
PlainResponse healthAnswer(bool healthy) {
  PlainResponse response;
  response.status = healthy ? 200 : 503;
  response.body = healthy ? "ok" : "unhealthy";
  return response;
}

struct Fixture {
  Fixture() {
    REQUIRE(uv_loop_init(&loop) == 0);
    auto opened = PlainHttpServer::open(
        &loop, ot::testing::loopbackListenAddress(), "http",
        ot::relayd::redirectHandler("relay.example.test", 8443,
                                    [this] { return healthAnswer(healthy.load()); }),
        nullptr);
    REQUIRE(opened.ok());
    server = std::move(opened).value();
    port = server->port();
    REQUIRE(port != 0);
  }
  ~Fixture() { CHECK(uv_loop_close(&loop) == 0); }

  // Sends `request` on a new connection and returns all the server sent until it closed.
  std::string exchange(const std::string& request) {
    std::string out;
    runWithClient(&loop, server, [&] {
      const int fd = ot::testing::connectLoopback(port);
      if (fd < 0) return;
      if (sendAll(fd, request)) out = readUntilClose(fd);
      ::close(fd);
    });
    return out;
  }

  uv_loop_t loop{};
  std::unique_ptr<PlainHttpServer> server;
  uint16_t port = 0;
  std::atomic<bool> healthy{true};
};

const std::string kHealthOk =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
    "Content-Length: 2\r\n\r\nok";

}  // namespace

TEST_CASE("plain http: GET /health answers 200 ok and closes when asked") {
  Fixture fixture;
  CHECK(fixture.exchange("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") ==
        kHealthOk);
}

TEST_CASE("plain http: other paths get a 301 to https with the exact Location") {
  Fixture fixture;
  CHECK(
      fixture.exchange("GET /a/b?c=d&e HTTP/1.1\r\nHost: evil.test\r\nConnection: close\r\n\r\n") ==
      "HTTP/1.1 301 Moved Permanently\r\nContent-Type: text/plain; charset=utf-8\r\n"
      "Location: https://relay.example.test:8443/a/b?c=d&e\r\nConnection: close\r\n"
      "Content-Length: 0\r\n\r\n");
}

TEST_CASE("plain http: HEAD gets the head only, then the connection serves a GET") {
  Fixture fixture;
  CHECK(fixture.exchange("HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n"
                         "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") ==
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n\r\n" +
            kHealthOk);
}

TEST_CASE("plain http: keep-alive serves two requests on one connection, one after the other") {
  Fixture fixture;
  std::string first;
  std::string second;
  std::string rest;
  runWithClient(&fixture.loop, fixture.server, [&] {
    const int fd = ot::testing::connectLoopback(fixture.port);
    if (fd < 0) return;
    if (sendAll(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")) first = readOneResponse(fd);
    if (sendAll(fd, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")) second = readOneResponse(fd);
    ::shutdown(fd, SHUT_WR);  // the server sees EOF between requests and closes
    rest = readUntilClose(fd);
    ::close(fd);
  });
  CHECK(
      first ==
      "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 2\r\n\r\nok");
  CHECK(second ==
        "HTTP/1.1 301 Moved Permanently\r\nContent-Type: text/plain; charset=utf-8\r\n"
        "Location: https://relay.example.test:8443/x\r\nContent-Length: 0\r\n\r\n");
  CHECK(rest.empty());
}

TEST_CASE("plain http: a malformed request gets 400 and the connection closes") {
  Fixture fixture;
  const std::string answer = fixture.exchange("GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n");
  CHECK(answer.rfind("HTTP/1.1 400 Bad Request\r\n", 0) == 0);
  CHECK(answer.find("Connection: close\r\n") != std::string::npos);
  // Nothing after the 400 even though the client never asked to close.
  const size_t headEnd = answer.find("\r\n\r\n");
  REQUIRE(headEnd != std::string::npos);
  CHECK(answer.substr(headEnd + 4) == "bad_request\n");
}

TEST_CASE("plain http: a body over 64 KiB is refused with 413") {
  Fixture fixture;
  const std::string answer =
      fixture.exchange("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 70000\r\n\r\n");
  CHECK(answer.rfind("HTTP/1.1 413 ", 0) == 0);
}

TEST_CASE("plain http: close() stops listening and lets the current request finish") {
  Fixture fixture;
  std::string answer;
  int refused = 0;
  uv_async_t closer{};
  closer.data = fixture.server.get();
  uv_async_init(&fixture.loop, &closer,
                [](uv_async_t* handle) { static_cast<PlainHttpServer*>(handle->data)->close(); });
  uv_unref(reinterpret_cast<uv_handle_t*>(&closer));  // the loop ends without it
  runWithClient(&fixture.loop, fixture.server, [&] {
    const int fd = ot::testing::connectLoopback(fixture.port);
    if (fd < 0) return;
    // Half a request, then the server closes, then the rest: the answer says Connection: close.
    sendAll(fd, "GET /health HTTP/1.1\r\n");
    // The half request must have been read before close(): a second connection accepted after
    // this one and answered means the loop has seen the first one's bytes too.
    const int probe = ot::testing::connectLoopback(fixture.port);
    if (probe >= 0) {
      sendAll(probe, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
      (void)readUntilClose(probe);
      ::close(probe);
    }
    uv_async_send(&closer);
    // Once the listener is closed, new connections are refused.
    for (int i = 0; i < 100000; ++i) {
      const int late = ot::testing::connectLoopback(fixture.port);
      if (late < 0) {
        refused = 1;
        break;
      }
      ::close(late);
      std::this_thread::yield();
    }
    sendAll(fd, "Host: x\r\n\r\n");
    answer = readUntilClose(fd);
    ::close(fd);
  });
  uv_close(reinterpret_cast<uv_handle_t*>(&closer), nullptr);
  uv_run(&fixture.loop, UV_RUN_DEFAULT);
  CHECK(refused == 1);
  CHECK(answer == kHealthOk);
}

TEST_CASE("plain http: redirectHandler rules") {
  auto healthy = true;
  auto handler =
      ot::relayd::redirectHandler("r.example", 443, [&] { return healthAnswer(healthy); });
  PlainResponse response = handler(PlainRequest{"GET", "/health", "x"});
  CHECK(response.status == 200);
  CHECK(response.body == "ok");
  response = handler(PlainRequest{"HEAD", "/health?probe=1", ""});
  CHECK(response.status == 200);
  healthy = false;
  response = handler(PlainRequest{"GET", "/health", "x"});
  CHECK(response.status == 503);
  response = handler(PlainRequest{"POST", "/health", "x"});
  CHECK(response.status == 301);
  REQUIRE(response.headers.size() == 1);
  CHECK(response.headers[0].first == "Location");
  CHECK(response.headers[0].second == "https://r.example/health");  // no :443
  response = handler(PlainRequest{"GET", "http://other.example/p?q", "other.example"});
  CHECK(response.headers[0].second == "https://r.example/p?q");
  response = handler(PlainRequest{"OPTIONS", "*", ""});
  CHECK(response.headers[0].second == "https://r.example/");
}
