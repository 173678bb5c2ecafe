#include "relayd/api_proxy.h"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/http_parser.h"

using ot::relayd::ApiProxy;
using ot::relayd::ProxiedResponse;

namespace {

std::vector<uint8_t> bytes(std::string_view text) {
  return {text.begin(), text.end()};
}
std::string text(const std::vector<uint8_t>& data) {
  return {data.begin(), data.end()};
}

// A stand-in for controld's API on a unix socket, on the test's loop. It reads one request per
// connection (recording its bytes), then answers according to `mode`.
class FakeUpstream {
 public:
  enum class Mode { kAnswer, kSilent, kHalfThenClose };

  FakeUpstream(uv_loop_t* loop, std::string path) : loop_(loop), path_(std::move(path)) {
    REQUIRE(uv_pipe_init(loop_, &server_, 0) == 0);
    server_.data = this;
    REQUIRE(uv_pipe_bind(&server_, path_.c_str()) == 0);
    REQUIRE(uv_listen(reinterpret_cast<uv_stream_t*>(&server_), 16, &FakeUpstream::onConnection) ==
            0);
  }

  // Closes the listening socket and every connection; run the loop afterwards to free them.
  void stop() {
    uv_close(reinterpret_cast<uv_handle_t*>(&server_), nullptr);
    const std::set<Connection*> open = connections_;
    for (Connection* connection : open) connection->close();
  }

  Mode mode = Mode::kAnswer;
  std::string answer;
  std::string received;  // the last complete request's bytes
  int requests = 0;
  std::function<void()> onRequest;  // after a complete request was read

 private:
  struct Connection {
    FakeUpstream* owner = nullptr;
    uv_pipe_t pipe{};
    uv_write_t write{};
    std::string data;
    std::string out;
    ot::HttpParser parser{ot::HttpParser::Kind::kRequest};
    bool closing = false;

    void close() {
      if (closing) return;
      closing = true;
      owner->connections_.erase(this);
      uv_close(reinterpret_cast<uv_handle_t*>(&pipe),
               [](uv_handle_t* handle) { delete static_cast<Connection*>(handle->data); });
    }
  };

  static void onConnection(uv_stream_t* server, int status) {
    auto* self = static_cast<FakeUpstream*>(server->data);
    if (status < 0) return;
    auto* connection = new Connection;
    connection->owner = self;
    uv_pipe_init(self->loop_, &connection->pipe, 0);
    connection->pipe.data = connection;
    connection->write.data = connection;
    self->connections_.insert(connection);
    if (uv_accept(server, reinterpret_cast<uv_stream_t*>(&connection->pipe)) != 0) {
      connection->close();
      return;
    }
    uv_read_start(
        reinterpret_cast<uv_stream_t*>(&connection->pipe),
        [](uv_handle_t*, size_t size, uv_buf_t* buffer) {
          *buffer = uv_buf_init(new char[size], static_cast<unsigned>(size));
        },
        &FakeUpstream::onRead);
  }

  static void onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buffer) {
    auto* connection = static_cast<Connection*>(stream->data);
    std::unique_ptr<char[]> owned(buffer->base);
    if (connection->closing || nread == 0) return;
    if (nread < 0) {
      connection->close();
      return;
    }
    const std::string_view piece(buffer->base, static_cast<size_t>(nread));
    connection->data.append(piece);
    const auto result = connection->parser.feed(piece);
    if (result.status != ot::HttpParseStatus::kDone) return;
    FakeUpstream* self = connection->owner;
    self->received = connection->data;
    self->requests += 1;
    if (self->onRequest) self->onRequest();
    if (connection->closing || self->mode == Mode::kSilent) return;
    connection->out = self->mode == Mode::kAnswer ? self->answer
                                                  : self->answer.substr(0, self->answer.size() / 2);
    uv_buf_t out =
        uv_buf_init(connection->out.data(), static_cast<unsigned>(connection->out.size()));
    uv_write(&connection->write, stream, &out, 1, [](uv_write_t* request, int) {
      static_cast<Connection*>(request->data)->close();  // Connection: close, as controld does
    });
  }

  uv_loop_t* loop_;
  std::string path_;
  uv_pipe_t server_{};
  std::set<Connection*> connections_;
};

struct Fixture {
  Fixture() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ot-api-proxy-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    dir = pattern;
    socketPath = dir + "/api.sock";
    REQUIRE(uv_loop_init(&loop) == 0);
  }
  ~Fixture() {
    // Everything the test left open must have been closed: the loop drains and closes cleanly.
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(&loop) == 0);
    std::filesystem::remove_all(dir);
  }

  // Sends `request` and runs the loop until the callback ran.
  std::optional<ot::Result<ProxiedResponse>> call(ApiProxy& proxy, std::string_view request) {
    std::optional<ot::Result<ProxiedResponse>> outcome;
    proxy.send(bytes(request),
               [&](ot::Result<ProxiedResponse> result) { outcome = std::move(result); });
    while (!outcome) uv_run(&loop, UV_RUN_ONCE);
    return outcome;
  }

  std::string dir;
  std::string socketPath;
  uv_loop_t loop{};
};

const std::string kRequest =
    "POST /v1/tunnels HTTP/1.1\r\nHost: api.example\r\nConnection: close\r\n"
    "X-OpenTunnel-Client-Address: 198.51.100.7:4242\r\nContent-Length: 2\r\n\r\n{}";

}  // namespace

TEST_CASE("api proxy: forwards the request bytes and returns the parsed final response") {
  Fixture fixture;
  FakeUpstream upstream(&fixture.loop, fixture.socketPath);
  upstream.answer =
      "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nConnection: close\r\n"
      "Content-Length: 11\r\n\r\n{\"id\":\"ab\"}";
  ApiProxy proxy(&fixture.loop, fixture.socketPath, 5000);
  auto outcome = fixture.call(proxy, kRequest);
  CHECK(upstream.received == kRequest);
  REQUIRE(outcome->ok());
  CHECK(outcome->value().message.status == 201);
  CHECK(outcome->value().message.reason == "Created");
  CHECK(outcome->value().message.header("Content-Type") == "application/json");
  CHECK(outcome->value().message.body == "{\"id\":\"ab\"}");
  CHECK_FALSE(outcome->value().headRequest);
  CHECK(proxy.inFlight() == 0);

  // A large body arrives in many reads; a body without framing ends at the upstream's close.
  upstream.answer =
      "HTTP/1.1 200 OK\r\nContent-Length: 3000000\r\n\r\n" + std::string(3'000'000, 'x');
  outcome = fixture.call(proxy, kRequest);
  REQUIRE(outcome->ok());
  CHECK(outcome->value().message.body == std::string(3'000'000, 'x'));
  upstream.answer = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end";
  outcome = fixture.call(proxy, kRequest);
  REQUIRE(outcome->ok());
  CHECK(outcome->value().message.status == 200);
  CHECK(outcome->value().message.body == "until the end");
  CHECK(upstream.requests == 3);
  upstream.stop();
}

TEST_CASE("api proxy: a HEAD answer ends with its head, an interim 100 is skipped") {
  Fixture fixture;
  FakeUpstream upstream(&fixture.loop, fixture.socketPath);
  ApiProxy proxy(&fixture.loop, fixture.socketPath, 5000);
  upstream.answer = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n";
  auto outcome = fixture.call(proxy, "HEAD /v1/x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  REQUIRE(outcome->ok());
  CHECK(outcome->value().message.status == 200);
  CHECK(outcome->value().headRequest);
  CHECK(outcome->value().message.contentLength == 10u);  // kept for the re-framed HEAD answer
  CHECK(outcome->value().message.body.empty());
  upstream.answer = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
  outcome = fixture.call(proxy, kRequest);
  REQUIRE(outcome->ok());
  CHECK(outcome->value().message.status == 204);
  CHECK(outcome->value().message.reason == "No Content");
  upstream.stop();
}

TEST_CASE("api proxy: no upstream socket gives kUnavailable") {
  Fixture fixture;
  ApiProxy proxy(&fixture.loop, fixture.socketPath, 5000);
  auto outcome = fixture.call(proxy, kRequest);
  REQUIRE_FALSE(outcome->ok());
  CHECK(outcome->error().kind == ot::ErrorKind::kUnavailable);
}

TEST_CASE("api proxy: an upstream that never answers times out") {
  Fixture fixture;
  FakeUpstream upstream(&fixture.loop, fixture.socketPath);
  upstream.mode = FakeUpstream::Mode::kSilent;
  ApiProxy proxy(&fixture.loop, fixture.socketPath, 200);
  uv_update_time(&fixture.loop);
  const uint64_t started = uv_now(&fixture.loop);
  auto outcome = fixture.call(proxy, kRequest);
  REQUIRE_FALSE(outcome->ok());
  CHECK(outcome->error().kind == ot::ErrorKind::kTimeout);
  CHECK(uv_now(&fixture.loop) - started >= 200);
  CHECK(upstream.requests == 1);
  upstream.stop();
}

TEST_CASE("api proxy: an upstream closing mid-response or answering garbage is an error") {
  Fixture fixture;
  FakeUpstream upstream(&fixture.loop, fixture.socketPath);
  ApiProxy proxy(&fixture.loop, fixture.socketPath, 5000);
  upstream.mode = FakeUpstream::Mode::kHalfThenClose;
  upstream.answer =
      "HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n0123456789012345678901234567890123456789";
  auto outcome = fixture.call(proxy, kRequest);
  REQUIRE_FALSE(outcome->ok());
  CHECK(outcome->error().kind == ot::ErrorKind::kUnavailable);

  upstream.mode = FakeUpstream::Mode::kAnswer;
  upstream.answer = "this is not http\r\n\r\n";
  outcome = fixture.call(proxy, kRequest);
  REQUIRE_FALSE(outcome->ok());
  CHECK(outcome->error().kind == ot::ErrorKind::kInvalid);

  upstream.answer = "";  // closed without a byte
  outcome = fixture.call(proxy, kRequest);
  REQUIRE_FALSE(outcome->ok());
  CHECK(outcome->error().kind == ot::ErrorKind::kUnavailable);

  upstream.answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA";
  outcome = fixture.call(proxy, kRequest);
  REQUIRE_FALSE(outcome->ok());
  CHECK(outcome->error().kind == ot::ErrorKind::kInvalid);
  upstream.stop();
}

TEST_CASE("api proxy: cancel and destruction drop calls without running their callbacks") {
  Fixture fixture;
  FakeUpstream upstream(&fixture.loop, fixture.socketPath);
  upstream.mode = FakeUpstream::Mode::kSilent;
  int callbacks = 0;
  {
    ApiProxy proxy(&fixture.loop, fixture.socketPath, 5000);
    // Cancelled before it even connected.
    const uint64_t early = proxy.send(bytes(kRequest), [&](auto) { ++callbacks; });
    CHECK(proxy.inFlight() == 1);
    proxy.cancel(early);
    proxy.cancel(early);  // unknown ids are ignored
    CHECK(proxy.inFlight() == 0);
    // Cancelled once the upstream has the request.
    uint64_t late = 0;
    upstream.onRequest = [&] { proxy.cancel(late); };
    late = proxy.send(bytes(kRequest), [&](auto) { ++callbacks; });
    while (upstream.requests < 1) uv_run(&fixture.loop, UV_RUN_ONCE);
    CHECK(proxy.inFlight() == 0);
    upstream.onRequest = nullptr;
    // Left in flight when the proxy goes away.
    proxy.send(bytes(kRequest), [&](auto) { ++callbacks; });
    while (upstream.requests < 2) uv_run(&fixture.loop, UV_RUN_ONCE);
    CHECK(proxy.inFlight() == 1);
  }
  upstream.stop();
  uv_run(&fixture.loop, UV_RUN_DEFAULT);
  CHECK(callbacks == 0);
}

TEST_CASE("api proxy: a callback may destroy the proxy") {
  Fixture fixture;
  auto proxy = std::make_unique<ApiProxy>(&fixture.loop, fixture.socketPath, 5000);
  int callbacks = 0;
  proxy->send(bytes(kRequest), [&](auto) {
    ++callbacks;
    proxy.reset();  // the other call is cancelled by the destructor
  });
  proxy->send(bytes(kRequest), [&](auto) {
    ++callbacks;
    proxy.reset();
  });
  uv_run(&fixture.loop, UV_RUN_DEFAULT);
  CHECK(callbacks == 1);
  CHECK(proxy == nullptr);
}

TEST_CASE("api proxy: JSON error answers are exact and escaped") {
  CHECK(text(ot::relayd::unavailableResponse("controld is \"down\"\n", true)) ==
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        "Retry-After: 5\r\nConnection: close\r\nContent-Length: 69\r\n\r\n"
        "{\"_tag\":\"ServiceUnavailableError\",\"message\":\"controld is \\\"down\\\"\\n\"}");
  CHECK(text(ot::relayd::jsonErrorResponse(404, "NotFound", "no such route", false,
                                           {{"X-Extra", "1"}})) ==
        "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nX-Extra: 1\r\n"
        "Content-Length: 45\r\n\r\n{\"_tag\":\"NotFound\",\"message\":\"no such route\"}");
  // Invalid UTF-8 does not throw: it is replaced.
  const std::string invalid = text(ot::relayd::jsonErrorResponse(400, "Bad", "\xff", true));
  CHECK(invalid.find("\"message\":\"\xef\xbf\xbd\"") != std::string::npos);
}

TEST_CASE(
    "api proxy: failAll ends every call in flight at once, not calls sent from its callbacks") {
  Fixture fixture;
  FakeUpstream upstream(&fixture.loop, fixture.socketPath);
  upstream.mode = FakeUpstream::Mode::kSilent;  // a frozen controld: accepts, never answers
  ApiProxy proxy(&fixture.loop, fixture.socketPath, 60'000);
  std::vector<ot::ErrorKind> ended;
  int laterCallbacks = 0;
  for (int i = 0; i < 3; ++i) {
    proxy.send(bytes(kRequest), [&](ot::Result<ProxiedResponse> result) {
      REQUIRE_FALSE(result.ok());
      ended.push_back(result.error().kind);
      // A caller that answers and goes on to its next request: that one is not failed here.
      if (ended.size() == 1) proxy.send(bytes(kRequest), [&](auto) { ++laterCallbacks; });
    });
  }
  while (upstream.requests < 3) uv_run(&fixture.loop, UV_RUN_ONCE);
  uv_update_time(&fixture.loop);
  const uint64_t before = uv_now(&fixture.loop);
  CHECK(proxy.failAll("the control session is down") == 3);
  CHECK(ended == std::vector<ot::ErrorKind>(3, ot::ErrorKind::kUnavailable));
  CHECK(uv_now(&fixture.loop) == before);  // at once, no loop turn
  CHECK(proxy.inFlight() == 1);
  CHECK(laterCallbacks == 0);
  CHECK(proxy.failAll("again") == 1);
  CHECK(laterCallbacks == 1);
  CHECK(proxy.failAll("nothing left") == 0);
  upstream.stop();
}
