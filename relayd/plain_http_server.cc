#include "relayd/plain_http_server.h"

#include <array>
#include <string_view>
#include <unordered_set>

#include "common/http_parser.h"
#include "common/http_serializer.h"
#include "common/write_backlog.h"
#include "relayd/listener.h"

namespace ot::relayd {
namespace {

constexpr uint64_t kIdleMs = 30'000;
constexpr size_t kMaxConnections = 1024;
constexpr size_t kReadBufferBytes = 64 * 1024;
// Stop reading from a client that pipelines faster than it reads its answers (the rule every
// relayd connection follows, with smaller marks: these answers are a few hundred bytes). The hard
// limit is never reached: nothing is read, so nothing is answered, past the high mark.
constexpr WriteBacklogMarks kAnswerBacklog{1024 * 1024, 512 * 1024, 2 * 1024 * 1024};

HttpParserLimits requestLimits() {
  HttpParserLimits limits;
  limits.maxHeaderBytes = 8 * 1024;
  limits.maxStartLineBytes = 8 * 1024;
  limits.maxBodyBytes = 64 * 1024;
  return limits;
}

// The request's bytes are parsed before the read callback returns, so one buffer per loop thread
// serves every connection.
thread_local std::array<char, kReadBufferBytes> readBuffer;

// The whole answer; HEAD gets the head GET would get. nullopt when the handler's fields are not
// writable (the caller answers 500 instead).
std::optional<std::string> serialize(const PlainResponse& response, bool head, bool close) {
  std::vector<HttpHeader> fields;
  fields.push_back({"Content-Type", response.contentType});
  for (const auto& [name, value] : response.headers) fields.push_back({name, value});
  if (close) fields.push_back({"Connection", "close"});
  const bool noContent = response.status < 200 || response.status == 204 || response.status == 304;
  auto out = serializeResponseHead(
      response.status, "", fields,
      noContent ? HttpFraming::none() : HttpFraming::length(response.body.size()));
  if (out && !head && !noContent) out->append(response.body);
  return out;
}

}  // namespace

struct PlainHttpServer::Impl {
  struct Connection;

  uv_loop_t* loop = nullptr;
  std::string name;
  Handler handler;
  RelayMetrics* metrics = nullptr;
  std::unique_ptr<Listener> listener;
  uint16_t port = 0;
  bool stopping = false;  // close(): no new connections, open ones end after their answer
  std::unordered_set<Connection*> connections;

  void accept(int fd);
  void closeAll();
};

// One client connection: its socket and idle timer, freed by the last close callback.
struct PlainHttpServer::Impl::Connection {
  Impl* server = nullptr;  // null once closing: the server may be gone before the callbacks run
  uv_tcp_t tcp{};
  uv_timer_t idle{};
  HttpParser parser{HttpParser::Kind::kRequest, requestLimits()};
  int openHandles = 0;
  size_t writesPending = 0;
  WriteBacklogGate backlog{kAnswerBacklog};
  bool closing = false;
  bool closeAfterWrite = false;  // the last answer said Connection: close
  bool midRequest = false;       // bytes of an unanswered request were received

  struct Write {
    uv_write_t request{};
    std::string data;
    Connection* connection = nullptr;
  };

  void start() {
    uv_read_start(reinterpret_cast<uv_stream_t*>(&tcp), &Connection::onAlloc, &Connection::onRead);
    touch();
  }

  void touch() { uv_timer_start(&idle, &Connection::onIdle, kIdleMs, 0); }

  void close() {
    if (closing) return;
    closing = true;
    if (server != nullptr) server->connections.erase(this);
    server = nullptr;
    uv_close(reinterpret_cast<uv_handle_t*>(&tcp), &Connection::onClosed);
    uv_close(reinterpret_cast<uv_handle_t*>(&idle), &Connection::onClosed);
  }

  // The server stops: close now if between requests, otherwise after this request's answer
  // (a request being received gets Connection: close since the server is stopping).
  void finishSoon() {
    if (midRequest) return;
    if (writesPending == 0) {
      close();
      return;
    }
    closeAfterWrite = true;
    uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp));
  }

  static void onClosed(uv_handle_t* handle) {
    auto* self = static_cast<Connection*>(handle->data);
    if (--self->openHandles == 0) delete self;
  }

  static void onIdle(uv_timer_t* handle) {
    auto* self = static_cast<Connection*>(handle->data);
    if (self->closing) return;
    self->close();
  }

  static void onAlloc(uv_handle_t*, size_t, uv_buf_t* buffer) {
    *buffer = uv_buf_init(readBuffer.data(), static_cast<unsigned>(readBuffer.size()));
  }

  static void onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buffer) {
    auto* self = static_cast<Connection*>(stream->data);
    if (self->closing || nread == 0) return;
    if (nread < 0) {
      // EOF: answers already queued still go out; anything else ends the connection now.
      if (nread == UV_EOF && self->writesPending > 0) {
        uv_read_stop(stream);
        self->closeAfterWrite = true;
        return;
      }
      self->close();
      return;
    }
    self->touch();
    self->consume(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(buffer->base),
                                           static_cast<size_t>(nread)));
  }

  void consume(std::span<const uint8_t> input) {
    while (!closing && !closeAfterWrite) {
      if (!input.empty()) midRequest = true;
      const HttpParseResult result = parser.feed(input);
      input = input.subspan(result.consumed);
      if (result.status == HttpParseStatus::kNeedMore) break;
      if (result.status == HttpParseStatus::kError) {
        PlainResponse answer;
        answer.status = httpErrorStatus(result.error);
        answer.body = std::string(httpErrorName(result.error)) + "\n";
        send(answer, false, true);
        break;
      }
      // kDone, or kUpgrade (an Upgrade or CONNECT we do not follow: answered, then closed).
      const HttpMessage& message = parser.message();
      const bool keepAlive = result.status == HttpParseStatus::kDone && message.keepAlive &&
                             server != nullptr && !server->stopping;
      PlainRequest request{message.method, message.target,
                           std::string(message.header("Host").value_or(""))};
      PlainResponse answer = server->handler(request);
      if (closing) return;
      send(answer, request.method == "HEAD", !keepAlive);
      if (!keepAlive) break;
      parser.reset();
      midRequest = false;
    }
    if (!closing && !closeAfterWrite &&
        backlog.update(uv_stream_get_write_queue_size(reinterpret_cast<uv_stream_t*>(&tcp))) &&
        backlog.paused()) {
      uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp));
    }
  }

  void send(const PlainResponse& answer, bool head, bool closeAfter) {
    std::optional<std::string> bytes = serialize(answer, head, closeAfter);
    if (!bytes) {
      PlainResponse failure;
      failure.status = 500;
      failure.body = "internal error\n";
      bytes = serialize(failure, head, closeAfter);
    }
    midRequest = false;
    if (closeAfter) {
      closeAfterWrite = true;
      uv_read_stop(reinterpret_cast<uv_stream_t*>(&tcp));
    }
    auto* write = new Write;
    write->data = std::move(*bytes);
    write->connection = this;
    write->request.data = write;
    uv_buf_t buffer = uv_buf_init(write->data.data(), static_cast<unsigned>(write->data.size()));
    const int status = uv_write(&write->request, reinterpret_cast<uv_stream_t*>(&tcp), &buffer, 1,
                                &Connection::onWritten);
    if (status != 0) {
      delete write;
      close();
      return;
    }
    ++writesPending;
  }

  static void onWritten(uv_write_t* request, int status) {
    auto* write = static_cast<Write*>(request->data);
    Connection* self = write->connection;
    delete write;
    --self->writesPending;
    if (self->closing) return;
    if (status < 0 || (self->closeAfterWrite && self->writesPending == 0)) {
      self->close();
      return;
    }
    self->touch();
    auto* stream = reinterpret_cast<uv_stream_t*>(&self->tcp);
    self->backlog.update(uv_stream_get_write_queue_size(stream));
    if (!self->closeAfterWrite && !self->backlog.paused()) {
      uv_read_start(stream, &Connection::onAlloc, &Connection::onRead);  // no-op when reading
    }
  }
};

void PlainHttpServer::Impl::accept(int fd) {
  if (stopping || connections.size() >= kMaxConnections) {
    ::close(fd);
    return;
  }
  // TCP_NODELAY and keepalive come from the listener (tuneSocket in Listener::open).
  auto* connection = new Connection;
  connection->server = this;
  uv_tcp_init(loop, &connection->tcp);
  uv_timer_init(loop, &connection->idle);
  connection->tcp.data = connection;
  connection->idle.data = connection;
  connection->openHandles = 2;
  if (uv_tcp_open(&connection->tcp, fd) != 0) {
    ::close(fd);
    connection->server = nullptr;
    connection->close();
    return;
  }
  connections.insert(connection);
  connection->start();
}

void PlainHttpServer::Impl::closeAll() {
  if (listener) listener->close();
  stopping = true;
  // close() erases from the set: iterate over a copy.
  const std::vector<Connection*> open(connections.begin(), connections.end());
  for (Connection* connection : open) connection->close();
}

Result<std::unique_ptr<PlainHttpServer>> PlainHttpServer::open(uv_loop_t* loop,
                                                               const config::ListenAddress& address,
                                                               std::string name, Handler handler,
                                                               RelayMetrics* metrics) {
  auto impl = std::make_unique<Impl>();
  impl->loop = loop;
  impl->name = name;
  impl->handler = std::move(handler);
  impl->metrics = metrics;
  Impl* raw = impl.get();
  auto listener = Listener::open(
      loop, address, std::move(name), [raw](int fd, const sockaddr_storage&) { raw->accept(fd); },
      metrics);
  if (!listener.ok()) return listener.error();
  impl->listener = std::move(listener).value();
  impl->port = impl->listener->port();
  return std::unique_ptr<PlainHttpServer>(new PlainHttpServer(std::move(impl)));
}

PlainHttpServer::PlainHttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PlainHttpServer::~PlainHttpServer() {
  if (impl_) impl_->closeAll();
}

uint16_t PlainHttpServer::port() const {
  return impl_->port;
}

void PlainHttpServer::close() {
  impl_->stopping = true;
  if (impl_->listener) impl_->listener->close();
  const std::vector<Impl::Connection*> open(impl_->connections.begin(), impl_->connections.end());
  for (Impl::Connection* connection : open) connection->finishSoon();
}

PlainHttpServer::Handler redirectHandler(std::string domain, uint16_t httpsPort,
                                         std::function<PlainResponse()> health) {
  std::string origin = "https://" + domain;
  if (httpsPort != 443) origin += ":" + std::to_string(httpsPort);
  return [origin = std::move(origin), health = std::move(health)](const PlainRequest& request) {
    PlainResponse response;
    std::string_view target = request.target;
    // Absolute form (a proxy-style request): keep only its path and query.
    if (target.starts_with("http://") || target.starts_with("https://")) {
      const size_t authority = target.find("//") + 2;
      const size_t path = target.find('/', authority);
      target = path == std::string_view::npos ? std::string_view("/") : target.substr(path);
    }
    if (!target.starts_with("/")) target = "/";  // "*" and other forms
    const std::string_view path = target.substr(0, target.find('?'));
    if ((request.method == "GET" || request.method == "HEAD") && path == "/health") {
      if (health) return health();
      response.body = "ok";
      return response;
    }
    response.status = 301;
    response.body = "";
    response.headers.emplace_back("Location", origin + std::string(target));
    return response;
  };
}

}  // namespace ot::relayd
