// controld's HTTP server over real sockets (a unix socket in a temporary directory and TCP on
// 127.0.0.1 port 0), with blocking client sockets in the test thread and curl for one case.
// Handlers echo the request, sleep, block on a gate the test opens, or throw. Nothing waits on
// the clock: every wait is for an event (a response, EOF, a handler entering), bounded by a 10 s
// socket timeout so a broken server fails a test instead of hanging it.
#include "controld/http/http_server.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/http_parser.h"
#include "common/metrics.h"
#include "controld/http/worker_pool.h"

namespace ot::controld {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/ot-http-XXXXXX";
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  [[nodiscard]] std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

sockaddr_un unixAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof(address.sun_path));
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

// A blocking client connection; responses are parsed with our own parser in response mode.
class Client {
 public:
  static Client tcp(uint16_t port) {
    Client client = tcpSocket();
    client.connectTcp(port);
    return client;
  }

  // A TCP socket not yet connected: its descriptor exists before the test runs out of them.
  static Client tcpSocket() { return Client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)); }

  void connectTcp(uint16_t port) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0);
  }

  static Client unixSocket(const std::string& path) {
    Client client(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const sockaddr_un address = unixAddress(path);
    REQUIRE(::connect(client.fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) ==
            0);
    return client;
  }

  Client(Client&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), buffer_(std::move(other.buffer_)) {}
  Client& operator=(Client&&) = delete;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client() {
    if (fd_ >= 0) ::close(fd_);
  }

  [[nodiscard]] int fd() const { return fd_; }

  void send(std::string_view data) {
    while (!data.empty()) {
      const ssize_t sent = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      REQUIRE(sent > 0);
      data.remove_prefix(static_cast<size_t>(sent));
    }
  }

  // The next response, or nullopt if the connection ends (or times out) before one is complete.
  std::optional<HttpMessage> response() {
    HttpParserLimits limits;
    limits.maxBodyBytes = 1024 * 1024;
    HttpParser parser(HttpParser::Kind::kResponse, limits);
    for (;;) {
      if (!buffer_.empty()) {
        const HttpParseResult result = parser.feed(buffer_);
        buffer_.erase(0, result.consumed);
        if (result.status == HttpParseStatus::kDone) return parser.takeMessage();
        REQUIRE(result.status == HttpParseStatus::kNeedMore);
      }
      if (!readMore()) return std::nullopt;
    }
  }

  // Reads (and drops) until the server closes; false on a reset or the safety timeout.
  bool waitEof() {
    buffer_.clear();
    char chunk[4096];
    for (;;) {
      const ssize_t got = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (got == 0) return true;
      if (got < 0) return false;
    }
  }

  // Everything until the server closes (for answers our parser does not read, like HEAD's).
  std::string readAll() {
    while (readMore()) {
    }
    return std::exchange(buffer_, {});
  }

 private:
  explicit Client(int fd) : fd_(fd) {
    REQUIRE(fd_ >= 0);
    const timeval timeout{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  }

  bool readMore() {
    char chunk[16384];
    const ssize_t got = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (got <= 0) return false;
    buffer_.append(chunk, static_cast<size_t>(got));
    return true;
  }

  int fd_;
  std::string buffer_;  // read past the last response
};

// Holds /block handlers in the worker pool until the test opens it.
class Gate {
 public:
  void enter() {
    std::unique_lock lock(mutex_);
    ++entered_;
    changed_.notify_all();
    changed_.wait(lock, [this] { return open_; });
  }
  [[nodiscard]] bool waitEntered(int count) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, 10s, [&] { return entered_ >= count; });
  }
  void open() {
    const std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int entered_ = 0;
  bool open_ = false;
};

std::string get(std::string_view target, std::string_view extra = "") {
  return "GET " + std::string(target) + " HTTP/1.1\r\nHost: test\r\n" + std::string(extra) + "\r\n";
}

std::string post(std::string_view target, std::string_view body, std::string_view extra = "") {
  return "POST " + std::string(target) +
         " HTTP/1.1\r\nHost: test\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
         std::string(extra) + "\r\n" + std::string(body);
}

Json bodyOf(const std::optional<HttpMessage>& response) {
  REQUIRE(response.has_value());
  return Json::parse(response->body);
}

struct Fixture {
  explicit Fixture(HttpServerOptions options = {}, size_t threads = 4, size_t queue = 64)
      : socketPath(dir.file("api.sock")),
        pool(threads, queue),
        server(
            pool, [this](const ApiRequest& request) { return handle(request); },
            std::move(options)) {
    std::signal(SIGPIPE, SIG_IGN);
  }
  ~Fixture() {
    gate.open();
    server.stop();
    pool.stop();
  }
  Fixture(const Fixture&) = delete;
  Fixture& operator=(const Fixture&) = delete;

  void start() {
    config::ListenAddress unixAddress{config::ListenAddress::Kind::kUnix, "", 0, socketPath};
    config::ListenAddress tcpAddress{config::ListenAddress::Kind::kTcp, "127.0.0.1", 0, ""};
    const std::vector listeners = {HttpListenerConfig::forApi(unixAddress),
                                   HttpListenerConfig::forApi(tcpAddress)};
    const Status started = server.start(listeners);
    REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().message));
    REQUIRE(server.boundPort(1) != 0);
  }

  Client tcp() { return Client::tcp(server.boundPort(1)); }
  Client unixClient() { return Client::unixSocket(socketPath); }

  ApiResponse handle(const ApiRequest& request) {
    if (request.path == "/sleep") {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(request.query.substr(3))));
    } else if (request.path == "/block") {
      gate.enter();
    } else if (request.path == "/throw") {
      throw std::runtime_error("handler failed");
    } else if (request.path == "/missing") {
      return ApiResponse::error(404, "NotFoundError", "no such thing");
    } else if (request.path == "/nothing") {
      return ApiResponse{.status = 204, .headers = {}, .body = {}};
    }
    const Json echo = {{"method", request.method},
                       {"path", request.path},
                       {"query", request.query},
                       {"body", request.body},
                       {"client_address", request.clientAddress},
                       {"client_address_header", request.header(kClientAddressHeader).has_value()}};
    return ApiResponse::json(200, echo.dump());
  }

  TempDir dir;
  std::string socketPath;
  Gate gate;
  WorkerPool pool;
  HttpServer server;
};

TEST_CASE("http worker pool: runs every task, stop drains the queue") {
  std::atomic<int> ran{0};
  WorkerPool pool(2, 100);
  CHECK(pool.threadCount() == 2);
  for (int i = 0; i < 50; ++i) REQUIRE(pool.submit([&ran] { ++ran; }));
  pool.stop();
  CHECK(ran.load() == 50);
  CHECK_FALSE(pool.submit([&ran] { ++ran; }));
  pool.stop();  // idempotent
}

TEST_CASE("http worker pool: a full queue refuses, a throwing task spares the thread") {
  Gate gate;
  std::atomic<int> ran{0};
  WorkerPool pool(1, 1);
  REQUIRE(pool.submit([&] {
    gate.enter();
    ++ran;
  }));
  REQUIRE(gate.waitEntered(1));
  CHECK(pool.submit([] { throw std::runtime_error("task failed"); }));
  CHECK(pool.queued() == 1);
  CHECK_FALSE(pool.submit([&ran] { ++ran; }));
  gate.open();
  pool.stop();
  CHECK(ran.load() == 1);

  WorkerPool after(1, 4);
  REQUIRE(after.submit([] { throw 42; }));
  REQUIRE(after.submit([&ran] { ++ran; }));
  after.stop();
  CHECK(ran.load() == 2);
}

TEST_CASE("http server: GET, POST and chunked POST on one keep-alive TCP connection") {
  Fixture f;
  f.start();
  Client client = f.tcp();

  client.send(get("/echo?x=1&y=%20"));
  auto response = client.response();
  REQUIRE(response);
  CHECK(response->status == 200);
  CHECK(response->header("Content-Type") == "application/json");
  CHECK_FALSE(response->header("Connection").has_value());
  Json echo = bodyOf(response);
  CHECK(echo["method"] == "GET");
  CHECK(echo["path"] == "/echo");
  CHECK(echo["query"] == "x=1&y=%20");
  CHECK(echo["body"] == "");
  CHECK(echo["client_address"] == "127.0.0.1");

  client.send(post("/things", "hello"));
  echo = bodyOf(client.response());
  CHECK(echo["method"] == "POST");
  CHECK(echo["path"] == "/things");
  CHECK(echo["body"] == "hello");

  client.send(
      "PUT /chunks HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  echo = bodyOf(client.response());
  CHECK(echo["method"] == "PUT");
  CHECK(echo["body"] == "hello world");

  client.send(get("http://api.example/absolute?q=1"));
  echo = bodyOf(client.response());
  CHECK(echo["path"] == "/absolute");
  CHECK(echo["query"] == "q=1");
}

TEST_CASE("http server: pipelined requests are answered in order, one at a time") {
  Fixture f;
  f.start();
  Client client = f.unixClient();
  // The first handler sleeps: were requests handled in parallel, the others would overtake it.
  client.send(get("/sleep?ms=150") + post("/echo", "abc") + get("/echo?n=3"));
  CHECK(bodyOf(client.response())["path"] == "/sleep");
  const Json second = bodyOf(client.response());
  CHECK(second["path"] == "/echo");
  CHECK(second["body"] == "abc");
  CHECK(bodyOf(client.response())["query"] == "n=3");

  // A request split across writes, after the pipeline drained.
  client.send("GET /echo?n=4 HTTP/1.1\r\nHo");
  client.send("st: test\r\n\r\n");
  CHECK(bodyOf(client.response())["query"] == "n=4");
}

TEST_CASE("http server: body limit, exact size passes and one byte more is a 413") {
  Fixture f;
  f.start();
  const std::string exact(kApiMaxBodyBytes, 'a');
  {
    Client client = f.tcp();
    client.send(post("/big", exact));
    const auto response = client.response();
    REQUIRE(response);
    CHECK(response->status == 200);
    CHECK(bodyOf(response)["body"].get<std::string>().size() == kApiMaxBodyBytes);
  }
  {
    Client client = f.tcp();
    client.send(post("/big", exact + "b"));
    const auto response = client.response();
    REQUIRE(response);
    CHECK(response->status == 413);
    CHECK(response->header("Connection") == "close");
    CHECK(response->header("Content-Type") == "application/json");
    const Json error = bodyOf(response);
    CHECK(error["_tag"] == "PayloadTooLargeError");
    CHECK(error["message"] == "request body larger than 65536 bytes");
    CHECK(client.waitEof());
  }
  {
    Client client = f.unixClient();  // chunked: found while reading the chunk sizes
    client.send("POST /big HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n10001\r\n");
    const auto response = client.response();
    REQUIRE(response);
    CHECK(response->status == 413);
    CHECK(bodyOf(response)["_tag"] == "PayloadTooLargeError");
    CHECK(client.waitEof());
  }
}

TEST_CASE("http server: malformed and oversized heads get JSON errors and a close") {
  Fixture f;
  f.start();
  struct Case {
    std::string request;
    int status;
    const char* tag;
  };
  const std::vector<Case> cases = {
      {"\x01\x02garbage\r\n\r\n", 400, "BadRequestError"},
      {"GET / HTTP/1.1\r\n\r\n", 400, "BadRequestError"},  // no Host
      {"GET / HTTP/1.1\r\nHost: test\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n", 431,
       "RequestHeaderFieldsTooLargeError"},
      {"GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nHost: test\r\n\r\n", 414,
       "UriTooLongError"},
      {"GET / HTTP/2.0\r\nHost: test\r\n\r\n", 505, "HttpVersionNotSupportedError"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.status);
    Client client = f.tcp();
    client.send(c.request);
    const auto response = client.response();
    REQUIRE(response);
    CHECK(response->status == c.status);
    CHECK(response->header("Connection") == "close");
    CHECK(bodyOf(response)["_tag"] == c.tag);
    CHECK(client.waitEof());
  }
}

TEST_CASE("http server: the client address header counts only on the unix socket") {
  Fixture f;
  f.start();
  const std::string header = std::string(kClientAddressHeader) + ": 203.0.113.9\r\n";
  Client unixClient = f.unixClient();
  unixClient.send(get("/echo", header));
  Json echo = bodyOf(unixClient.response());
  CHECK(echo["client_address"] == "203.0.113.9");
  CHECK(echo["client_address_header"] == true);

  unixClient.send(get("/echo"));
  CHECK(bodyOf(unixClient.response())["client_address"] == "");

  unixClient.send(get("/echo", header + header));
  const auto repeated = unixClient.response();
  REQUIRE(repeated);
  CHECK(repeated->status == 400);
  CHECK(bodyOf(repeated)["_tag"] == "BadRequestError");
  CHECK(unixClient.waitEof());

  Client tcpClient = f.tcp();
  tcpClient.send(get("/echo", header + "x-opentunnel-client-address: 10.0.0.1\r\n"));
  echo = bodyOf(tcpClient.response());
  CHECK(echo["client_address"] == "127.0.0.1");
  CHECK(echo["client_address_header"] == false);  // removed before the handler sees it
}

TEST_CASE("http server: a handler that throws gives a 500 and the connection goes on") {
  Fixture f;
  f.start();
  Client client = f.tcp();
  client.send(get("/throw"));
  const auto response = client.response();
  REQUIRE(response);
  CHECK(response->status == 500);
  CHECK(bodyOf(response)["_tag"] == "InternalError");
  client.send(get("/echo"));
  CHECK(bodyOf(client.response())["path"] == "/echo");
}

TEST_CASE("http server: a full worker queue answers 503") {
  Fixture f({}, 1, 1);
  f.start();
  Client running = f.tcp();
  running.send(get("/block"));
  REQUIRE(f.gate.waitEntered(1));  // the only worker is busy; the queue holds one more

  Client first = f.tcp();
  Client second = f.unixClient();
  first.send(get("/block"));
  second.send(get("/block"));
  // Whichever arrived second found the queue full and is answered at once.
  pollfd fds[2] = {{first.fd(), POLLIN, 0}, {second.fd(), POLLIN, 0}};
  REQUIRE(::poll(fds, 2, 10'000) == 1);
  Client& refused = (fds[0].revents & POLLIN) != 0 ? first : second;
  Client& queued = (fds[0].revents & POLLIN) != 0 ? second : first;
  const auto busy = refused.response();
  REQUIRE(busy);
  CHECK(busy->status == 503);
  const Json error = bodyOf(busy);
  CHECK(error["_tag"] == "ServiceUnavailableError");
  CHECK(error["message"] == "server busy");

  f.gate.open();
  CHECK(bodyOf(running.response())["path"] == "/block");
  CHECK(bodyOf(queued.response())["path"] == "/block");
  refused.send(get("/echo"));  // a 503 keeps the connection
  CHECK(bodyOf(refused.response())["path"] == "/echo");
}

TEST_CASE("http server: idle and request timeouts close the connection") {
  HttpServerOptions options;
  options.idleTimeout = 100ms;
  options.headerTimeout = 100ms;
  Fixture f(options);
  f.start();

  Client idle = f.tcp();
  idle.send(get("/echo"));
  CHECK(idle.response());
  CHECK(idle.waitEof());

  Client partial = f.unixClient();
  partial.send("GET /echo HTTP/1.1\r\n");
  CHECK(partial.waitEof());

  Client silent = f.tcp();
  CHECK(silent.waitEof());
}

TEST_CASE("http server: stop() closes open connections and returns promptly") {
  auto f = std::make_unique<Fixture>();
  f->start();
  Client idle = f->tcp();
  idle.send(get("/echo"));
  REQUIRE(idle.response());
  Client partial = f->unixClient();
  partial.send("POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 10\r\n\r\nabc");
  Client blocked = f->tcp();
  blocked.send(get("/block"));
  REQUIRE(f->gate.waitEntered(1));

  const auto before = std::chrono::steady_clock::now();
  f->server.stop();
  CHECK(std::chrono::steady_clock::now() - before < 5s);
  CHECK(idle.waitEof());
  CHECK(partial.waitEof());
  CHECK(blocked.waitEof());
  CHECK_FALSE(std::filesystem::exists(f->socketPath));
  f->server.stop();  // idempotent
  f.reset();         // the blocked handler finishes now; its response has nowhere to go
}

TEST_CASE("http server: stop() with a grace answers the requests already read, then closes") {
  HttpServerOptions options;
  options.stopGrace = 10s;
  auto f = std::make_unique<Fixture>(options);
  f->start();
  Client idle = f->tcp();
  idle.send(get("/echo"));
  REQUIRE(idle.response());
  Client blocked = f->unixClient();
  blocked.send(post("/block", "created?"));
  REQUIRE(f->gate.waitEntered(1));

  std::jthread stopper([&] { f->server.stop(); });
  // Between requests: closed at once. New connections: refused (the listeners are gone).
  CHECK(idle.waitEof());
  CHECK_FALSE(std::filesystem::exists(f->socketPath));
  f->gate.open();
  const auto answer = blocked.response();
  REQUIRE(answer.has_value());
  CHECK(answer->status == 200);
  CHECK(bodyOf(answer)["body"] == "created?");
  CHECK(answer->header("Connection").value_or("") == "close");
  CHECK(blocked.waitEof());
}

TEST_CASE("http server: stop() cuts what is still open when its grace ends") {
  HttpServerOptions options;
  options.stopGrace = 300ms;
  auto f = std::make_unique<Fixture>(options);
  f->start();
  Client blocked = f->tcp();
  blocked.send(get("/block"));
  REQUIRE(f->gate.waitEntered(1));
  f->server.stop();  // the handler never returns within the grace
  CHECK_FALSE(blocked.response().has_value());
  f.reset();
}

TEST_CASE("http server: a stale unix socket file is replaced, a live one or a file is not") {
  TempDir dir;
  const std::string path = dir.file("stale.sock");
  {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    const sockaddr_un address = unixAddress(path);
    REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0);
    ::close(fd);  // the file stays, nobody listens: what a crash leaves behind
  }
  REQUIRE(std::filesystem::exists(path));

  WorkerPool pool(2, 8);
  const ApiHandler handler = [](const ApiRequest& request) {
    return ApiResponse::json(200, Json{{"path", request.path}}.dump());
  };
  const config::ListenAddress address{config::ListenAddress::Kind::kUnix, "", 0, path};
  const std::vector listeners = {HttpListenerConfig::forApi(address)};
  HttpServer server(pool, handler);
  const Status started = server.start(listeners);
  REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().message));
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0660);
  Client client = Client::unixSocket(path);
  client.send(get("/after-stale"));
  CHECK(bodyOf(client.response())["path"] == "/after-stale");

  HttpServer second(pool, handler);  // the first one answers on the path: keep out
  const Status refused = second.start(listeners);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("listening") != std::string::npos);
  client.send(get("/still-first"));
  CHECK(bodyOf(client.response())["path"] == "/still-first");

  const std::string regular = dir.file("regular");
  {
    std::FILE* file = std::fopen(regular.c_str(), "w");
    REQUIRE(file != nullptr);
    std::fclose(file);
  }
  const config::ListenAddress onFile{config::ListenAddress::Kind::kUnix, "", 0, regular};
  const std::vector fileListeners = {HttpListenerConfig::forApi(onFile)};
  HttpServer third(pool, handler);
  CHECK_FALSE(third.start(fileListeners).ok());
  CHECK(std::filesystem::is_regular_file(regular));

  server.stop();
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("http server: curl over the unix socket") {
  Fixture f;
  f.start();
  const std::string command =
      "curl -sS --max-time 10 --unix-socket " + f.socketPath + " -H '" +
      std::string(kClientAddressHeader) +
      ": 198.51.100.4' --data-binary 'from curl' 'http://localhost/curl?y=2' 2>&1";
  std::FILE* curl = ::popen(command.c_str(), "r");
  REQUIRE(curl != nullptr);
  std::string output;
  char chunk[4096];
  for (size_t got; (got = std::fread(chunk, 1, sizeof(chunk), curl)) > 0;)
    output.append(chunk, got);
  CHECK(::pclose(curl) == 0);
  INFO(output);
  const Json echo = Json::parse(output);
  CHECK(echo["method"] == "POST");
  CHECK(echo["path"] == "/curl");
  CHECK(echo["query"] == "y=2");
  CHECK(echo["body"] == "from curl");
  CHECK(echo["client_address"] == "198.51.100.4");
}

TEST_CASE("http server: Expect 100-continue, HEAD and HTTP/1.0") {
  Fixture f;
  f.start();
  Client client = f.tcp();
  client.send(
      "POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  const auto interim = client.response();
  REQUIRE(interim);
  CHECK(interim->status == 100);
  client.send("hello");
  CHECK(bodyOf(client.response())["body"] == "hello");

  // HEAD: the GET's Content-Length without the body (a 204 gets none); each response follows the
  // previous head directly.
  client.send(
      "HEAD /nothing HTTP/1.1\r\nHost: test\r\n\r\nHEAD /echo HTTP/1.1\r\nHost: test\r\n\r\n" +
      get("/echo", "Connection: close\r\n"));
  const std::string all = client.readAll();
  CHECK(all.starts_with("HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\n"));
  const size_t headStart = all.find("HTTP/1.1 200 OK\r\n");
  const size_t headEnd = all.find("\r\n\r\n", headStart);
  REQUIRE(headEnd != std::string::npos);
  CHECK(all.find("Content-Length: ", headStart) < headEnd);
  CHECK(all.substr(headEnd + 4).starts_with("HTTP/1.1 200 OK\r\n"));
  CHECK(all.ends_with("}"));  // the GET's body, the last thing before the close

  Client old = f.tcp();
  old.send("GET /echo HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  const auto kept = old.response();
  REQUIRE(kept);
  CHECK(kept->header("Connection") == "keep-alive");
  old.send("GET /echo HTTP/1.0\r\n\r\n");
  const auto closed = old.response();
  REQUIRE(closed);
  CHECK(closed->header("Connection") == "close");
  CHECK(old.waitEof());
}

TEST_CASE("http server: out of descriptors, accepting pauses and then resumes") {
  metrics::Metrics metrics("test");
  HttpServerOptions options;
  options.metrics = &metrics;
  options.acceptPause = 50ms;
  Fixture f(options);
  f.start();
  auto& emfile =
      metrics.counter("test_accept_errors_total", "", {{"server", "api"}, {"error", "emfile"}});

  Client client = Client::tcpSocket();
  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  std::vector<int> spent;
  {
    // Use up every descriptor the soft limit allows (lowered first, so that is quick).
    const int probe = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    REQUIRE(probe >= 0);
    rlimit low = saved;
    low.rlim_cur = std::min<rlim_t>(saved.rlim_cur, static_cast<rlim_t>(probe) + 64);
    REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
    spent.push_back(probe);
    for (int fd; (fd = ::fcntl(probe, F_DUPFD_CLOEXEC, 0)) >= 0;) spent.push_back(fd);
    CHECK(errno == EMFILE);
  }
  client.connectTcp(f.server.boundPort(1));  // completes in the kernel; accept(2) fails
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (emfile.Value() < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  for (const int fd : spent) ::close(fd);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &saved) == 0);
  CHECK(emfile.Value() >= 1);

  // The connection waited in the backlog and is served once accepting resumes.
  client.send(get("/echo?after=emfile"));
  CHECK(bodyOf(client.response())["query"] == "after=emfile");
}

TEST_CASE("http server: connection limit, draining and metrics") {
  metrics::Metrics metrics("test");
  HttpServerOptions options;
  options.maxConnections = 2;
  options.metrics = &metrics;
  Fixture f(options);
  f.start();
  auto& ok =
      metrics.counter("test_http_requests_total", "", {{"server", "api"}, {"status_class", "2xx"}});
  auto& clientErrors =
      metrics.counter("test_http_requests_total", "", {{"server", "api"}, {"status_class", "4xx"}});
  auto& open = metrics.gauge("test_http_connections_open", "", {{"server", "api"}});
  auto& rejected = metrics.counter("test_http_connections_rejected_total", "", {{"server", "api"}});

  Client first = f.tcp();
  first.send(get("/block"));
  REQUIRE(f.gate.waitEntered(1));
  Client second = f.unixClient();
  second.send(get("/missing"));
  const auto missing = second.response();
  REQUIRE(missing);
  CHECK(missing->status == 404);
  CHECK(open.Value() == 2);

  Client third = f.tcp();  // over the limit: accepted and closed at once
  CHECK(third.waitEof());
  CHECK(rejected.Value() == 1);

  f.server.setDraining(true);
  f.gate.open();  // the request in progress is answered, with Connection: close
  const auto last = first.response();
  REQUIRE(last);
  CHECK(last->status == 200);
  CHECK(last->header("Connection") == "close");
  CHECK(first.waitEof());
  CHECK(second.waitEof());  // between requests while draining: closed by the sweep

  CHECK(ok.Value() == 1);
  CHECK(clientErrors.Value() == 1);
  f.server.stop();
  CHECK(open.Value() == 0);
}

}  // namespace
}  // namespace ot::controld
