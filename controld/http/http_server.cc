#include "controld/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <csignal>
#include <cstring>
#include <exception>
#include <utility>

#include "controld/http/http_connection.h"
#include "controld/http/http_server_core.h"

namespace ot::controld {
namespace {

constexpr size_t kReadBufferBytes = 64 * 1024;

uint64_t durationMillis(std::chrono::milliseconds duration) {
  return duration.count() <= 0 ? 0 : static_cast<uint64_t>(duration.count());
}

// The peer's IP as text; an IPv4-mapped IPv6 address (a dual-stack listener) as plain IPv4.
std::string peerIp(const sockaddr_storage& peer) {
  std::array<char, INET6_ADDRSTRLEN> text{};
  if (peer.ss_family == AF_INET) {
    sockaddr_in v4{};
    std::memcpy(&v4, &peer, sizeof(v4));
    if (::inet_ntop(AF_INET, &v4.sin_addr, text.data(), text.size()) == nullptr) return {};
    return text.data();
  }
  if (peer.ss_family != AF_INET6) return {};
  sockaddr_in6 v6{};
  std::memcpy(&v6, &peer, sizeof(v6));
  const uint8_t* bytes = v6.sin6_addr.s6_addr;
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(bytes, kMapped, sizeof(kMapped)) == 0) {
    in_addr v4{};
    std::memcpy(&v4, bytes + 12, sizeof(v4));
    if (::inet_ntop(AF_INET, &v4, text.data(), text.size()) == nullptr) return {};
    return text.data();
  }
  if (::inet_ntop(AF_INET6, &v6.sin6_addr, text.data(), text.size()) == nullptr) return {};
  return text.data();
}

}  // namespace

// What worker tasks share with the loop; see http_server_core.h.
struct HttpServerCore::Dispatch {
  Dispatch(ApiHandler apiHandler, uv_async_t* async)
      : handler(std::move(apiHandler)), mailbox(async) {}

  void run(uint64_t connection, const ApiRequest& request) {
    ApiResponse response;
    try {
      response = handler(request);
    } catch (const std::exception& e) {
      log.error("API handler threw",
                {{"method", request.method}, {"path", request.path}, {"error", e.what()}});
      response = ApiResponse::error(500, "InternalError", "internal error");
    } catch (...) {
      log.error("API handler threw",
                {{"method", request.method}, {"path", request.path}, {"error", "unknown"}});
      response = ApiResponse::error(500, "InternalError", "internal error");
    }
    mailbox.post({connection, std::move(response)});
  }

  // A streamed request: the handler reads and answers through the exchange; one that returns
  // without answering gets a 500, one that stops mid-stream has its response cut.
  void runStream(const ApiRequest& head, const StreamHandler& streamHandler,
                 StreamExchange& exchange) {
    try {
      streamHandler(head, exchange);
    } catch (const std::exception& e) {
      log.error("API stream handler threw",
                {{"method", head.method}, {"path", head.path}, {"error", e.what()}});
    } catch (...) {
      log.error("API stream handler threw", {{"method", head.method}, {"path", head.path}});
    }
    exchange.respond(ApiResponse::error(500, "InternalError", "internal error"));
    exchange.abortResponse();
    --streams;
  }

  const ApiHandler handler;
  ResponseMailbox mailbox;
  std::atomic<size_t> streams{0};  // stream handlers queued or running
  const log::Logger log{"controld.http"};
};

void ResponseMailbox::post(Completion completion) {
  const std::lock_guard lock(mutex_);
  if (closed_) return;
  items_.push_back(std::move(completion));
  uv_async_send(async_);
}

void ResponseMailbox::wake() {
  const std::lock_guard lock(mutex_);
  if (!closed_) uv_async_send(async_);
}

void ResponseMailbox::poke(uint64_t connection) {
  const std::lock_guard lock(mutex_);
  if (closed_) return;
  pokes_.push_back(connection);
  uv_async_send(async_);
}

std::vector<uint64_t> ResponseMailbox::takePokes() {
  const std::lock_guard lock(mutex_);
  return std::exchange(pokes_, {});
}

std::vector<ResponseMailbox::Completion> ResponseMailbox::take() {
  const std::lock_guard lock(mutex_);
  return std::exchange(items_, {});
}

void ResponseMailbox::close() {
  const std::lock_guard lock(mutex_);
  closed_ = true;
  items_.clear();
}

HttpServerCore::HttpServerCore(WorkerPool& pool, ApiHandler handler, HttpServerOptions options)
    : pool_(pool),
      options_(std::move(options)),
      dispatch_(std::make_shared<Dispatch>(std::move(handler), &wake_)) {
  if (options_.metrics == nullptr) return;
  metrics::Metrics& m = *options_.metrics;
  const std::string& prefix = m.prefix();
  const std::string& server = options_.name;
  static constexpr std::array<const char*, 4> kClasses = {"2xx", "3xx", "4xx", "5xx"};
  for (size_t i = 0; i < kClasses.size(); ++i) {
    requests_[i] =
        &m.counter(prefix + "_http_requests_total", "HTTP responses sent, by status class",
                   {{"server", server}, {"status_class", kClasses[i]}});
  }
  connectionsOpen_ =
      &m.gauge(prefix + "_http_connections_open", "HTTP connections open", {{"server", server}});
  connectionsRejected_ = &m.counter(prefix + "_http_connections_rejected_total",
                                    "HTTP connections closed at accept: connection limit reached",
                                    {{"server", server}});
  const std::string acceptHelp = "failed accepts; emfile is running out of descriptors";
  acceptErrorsEmfile_ = &m.counter(prefix + "_accept_errors_total", acceptHelp,
                                   {{"server", server}, {"error", "emfile"}});
  acceptErrorsOther_ = &m.counter(prefix + "_accept_errors_total", acceptHelp,
                                  {{"server", server}, {"error", "other"}});
}

HttpServerCore::~HttpServerCore() {
  stop();
}

Status HttpServerCore::start(std::span<const HttpListenerConfig> listeners) {
  if (started_) return Error{ErrorKind::kInvalid, "HTTP server started twice"};
  // Bind everything first: a failure then leaves nothing behind (the sockets close themselves).
  std::vector<net::ListenSocket> sockets;
  std::string names;
  for (const auto& listener : listeners) {
    auto socket = net::ListenSocket::open(listener.address, options_.backlog);
    if (!socket) return socket.error();
    names += (names.empty() ? "" : " ") + socket->name();
    sockets.push_back(std::move(socket).value());
  }
  // libuv writes with write(2): a peer gone mid-write would otherwise kill the process.
  std::signal(SIGPIPE, SIG_IGN);

  if (const int rc = uv_loop_init(&loop_); rc != 0) {
    return Error{ErrorKind::kInternal, std::string("uv_loop_init: ") + uv_strerror(rc)};
  }
  started_ = true;
  readBuffer_.resize(kReadBufferBytes);
  Status status = Ok{};
  if (const int rc = uv_async_init(
          &loop_, &wake_,
          [](uv_async_t* async) { static_cast<HttpServerCore*>(async->data)->onWake(); });
      rc != 0) {
    uv_loop_close(&loop_);
    joined_ = true;
    return Error{ErrorKind::kInternal, std::string("uv_async_init: ") + uv_strerror(rc)};
  }
  wake_.data = this;
  uv_timer_init(&loop_, &sweepTimer_);
  sweepTimer_.data = this;
  const uint64_t shortest = durationMillis(
      std::min({options_.headerTimeout, options_.idleTimeout, options_.lingerTimeout}));
  const uint64_t interval = std::clamp<uint64_t>(shortest / 4, 10, 1000);
  uv_timer_start(
      &sweepTimer_, [](uv_timer_t* timer) { static_cast<HttpServerCore*>(timer->data)->sweep(); },
      interval, interval);

  for (size_t i = 0; i < sockets.size(); ++i) {
    auto listener = std::make_unique<Listener>();
    listener->isUnix = sockets[i].isUnix();
    listener->trustClientAddress = listeners[i].trustClientAddressHeader;
    boundPorts_.push_back(sockets[i].port());
    auto accept = net::AcceptLoop::start(
        &loop_, std::move(sockets[i]), durationMillis(options_.acceptPause),
        [this, self = listener.get()](int fd, const sockaddr_storage& peer) {
          onAccept(*self, fd, peer);
        },
        [this](const net::AcceptFailure& failure) { onAcceptError(failure); });
    if (!accept) {
      status = accept.error();
      break;
    }
    listener->accept = std::move(accept).value();
    listeners_.push_back(std::move(listener));
  }
  if (!status) {
    closeAll();
    uv_run(&loop_, UV_RUN_DEFAULT);  // runs the close callbacks
    uv_loop_close(&loop_);
    joined_ = true;
    return status;
  }
  log_.info("HTTP server listening", {{"server", options_.name}, {"listeners", names}});
  thread_ = std::thread([this] { uv_run(&loop_, UV_RUN_DEFAULT); });
  return Ok{};
}

void HttpServerCore::stop() {
  if (!started_ || joined_) return;
  stopRequested_.store(true);
  dispatch_->mailbox.wake();
  thread_.join();
  joined_ = true;
  if (const int rc = uv_loop_close(&loop_); rc != 0) {
    log_.error("HTTP server loop closed with handles open", {{"error", uv_strerror(rc)}});
  }
  log_.info("HTTP server stopped", {{"server", options_.name}});
}

void HttpServerCore::setDraining(bool draining) {
  draining_.store(draining);
}

uint16_t HttpServerCore::boundPort(size_t listener) const {
  return listener < boundPorts_.size() ? boundPorts_[listener] : 0;
}

uv_buf_t HttpServerCore::readBuffer() {
  return uv_buf_init(readBuffer_.data(), static_cast<unsigned int>(readBuffer_.size()));
}

bool HttpServerCore::submit(uint64_t connection, ApiRequest request) {
  return pool_.submit([dispatch = dispatch_, connection, request = std::move(request)] {
    dispatch->run(connection, request);
  });
}

void HttpServerCore::countResponse(int status) {
  const int statusClass = status / 100;
  if (statusClass < 2 || statusClass > 5) return;
  if (auto* counter = requests_[static_cast<size_t>(statusClass - 2)]) counter->Increment();
}

void HttpServerCore::forget(uint64_t connection) {
  if (connections_.erase(connection) != 0 && connectionsOpen_ != nullptr) {
    connectionsOpen_->Decrement();
  }
  // The last answer of a graceful stop went: finish on the next turn, outside this close.
  if (stopping_ && connections_.empty()) uv_async_send(&wake_);
}

// Loop thread. Every handle is closed; uv_run returns once their close callbacks ran.
void HttpServerCore::closeAll() {
  if (closing_) return;
  closing_ = true;
  dispatch_->mailbox.close();  // from here on no worker calls uv_async_send
  uv_close(reinterpret_cast<uv_handle_t*>(&wake_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&sweepTimer_), nullptr);
  listeners_.clear();  // each AcceptLoop closes its handles
  while (!connections_.empty()) connections_.begin()->second->close();
}

// Loop thread. A stop with a grace: no new connections, none kept between requests, and every
// request already read is answered (with Connection: close) within the grace; sweep() ends it.
void HttpServerCore::beginStop() {
  const uint64_t grace = durationMillis(options_.stopGrace);
  if (grace == 0) {
    closeAll();
    return;
  }
  stopping_ = true;
  draining_.store(true);
  stopDeadline_ = uv_now(&loop_) + grace;
  listeners_.clear();  // each AcceptLoop closes its handles
  sweep();             // connections between requests close now
  log_.info("HTTP server stopping: answering open requests",
            {{"server", options_.name}, {"connections", connections_.size()}, {"grace_ms", grace}});
  if (connections_.empty()) closeAll();
}

void HttpServerCore::onWake() {
  if (closing_) return;
  if (stopRequested_.load()) {
    if (!stopping_) {
      beginStop();
      if (closing_) return;
    } else if (connections_.empty()) {
      closeAll();
      return;
    }
  }
  for (auto& completion : dispatch_->mailbox.take()) {
    // The connection may have closed meanwhile (a write error, a reset): then nobody waits.
    const auto found = connections_.find(completion.connection);
    if (found != connections_.end()) found->second->onResponse(std::move(completion.response));
  }
  for (const uint64_t id : dispatch_->mailbox.takePokes()) {
    const auto found = connections_.find(id);
    if (found != connections_.end()) found->second->onStreamEvent();
  }
}

void HttpServerCore::onAccept(const Listener& listener, int fd, const sockaddr_storage& peer) {
  if (closing_) {
    ::close(fd);
    return;
  }
  if (connections_.size() >= options_.maxConnections) {
    if (connectionsRejected_ != nullptr) connectionsRejected_->Increment();
    ::close(fd);
    return;
  }
  acceptConnection(listener, fd, peer);
}

void HttpServerCore::acceptConnection(const Listener& listener, int fd,
                                      const sockaddr_storage& peer) {
  const bool isUnix = listener.isUnix;
  const uint64_t id = nextConnectionId_++;
  auto* connection =
      new HttpConnection(*this, id, listener.trustClientAddress, isUnix ? "" : peerIp(peer));
  connections_.emplace(id, connection);
  if (connectionsOpen_ != nullptr) connectionsOpen_->Increment();
  // On failure it has closed itself and left the table.
  static_cast<void>(connection->open(&loop_, fd, !isUnix));
}

// The failing listener pauses itself (net::AcceptLoop); out of descriptors, the others would fail
// the same way, so they pause with it and the backlog waits in the kernel meanwhile.
void HttpServerCore::onAcceptError(const net::AcceptFailure& failure) {
  // Counted as "emfile" like relayd's listeners: what net::AcceptStatus::kOutOfResources covers.
  const bool emfile = failure.outOfResources;
  if (auto* counter = emfile ? acceptErrorsEmfile_ : acceptErrorsOther_) counter->Increment();
  uint64_t suppressed = 0;
  if (acceptLogThrottle_.allow(uv_now(&loop_), suppressed)) {
    log_.warn("accept failed; pausing new connections",
              {{"server", options_.name},
               {"error_class", emfile ? "emfile" : "other"},
               {"error", uv_strerror(uv_translate_sys_error(failure.error))},
               {"suppressed", suppressed}});
  }
  for (const auto& listener : listeners_) listener->accept->pause();
}

StreamHandler HttpServerCore::streamHandler(const ApiRequest& head) const {
  if (!options_.streamRoutes) return {};
  return options_.streamRoutes(head);
}

std::shared_ptr<StreamExchange> HttpServerCore::submitStream(uint64_t connection, ApiRequest head,
                                                             StreamHandler handler) {
  if (dispatch_->streams.fetch_add(1) >= options_.maxStreams) {
    --dispatch_->streams;
    return nullptr;
  }
  // The exchange pokes through the Dispatch (never the core), like a late response.
  auto exchange =
      std::make_shared<StreamExchange>([dispatch = std::weak_ptr<Dispatch>(dispatch_), connection] {
        if (auto live = dispatch.lock()) live->mailbox.poke(connection);
      });
  const bool queued =
      pool_.submit([dispatch = dispatch_, head = std::move(head), handler = std::move(handler),
                    exchange] { dispatch->runStream(head, handler, *exchange); });
  if (!queued) {
    --dispatch_->streams;
    return nullptr;
  }
  return exchange;
}

void HttpServerCore::sweep() {
  if (closing_) return;
  const uint64_t now = uv_now(&loop_);
  if (stopping_ && now >= stopDeadline_) {
    log_.warn("HTTP server stop grace over: cutting open requests",
              {{"server", options_.name}, {"connections", connections_.size()}});
    closeAll();
    return;
  }
  const bool isDraining = draining();
  std::vector<HttpConnection*> expired;
  for (const auto& [id, connection] : connections_) {
    if (connection->expired(now, isDraining)) expired.push_back(connection);
  }
  for (HttpConnection* connection : expired) connection->close();
}

HttpServer::HttpServer(WorkerPool& pool, ApiHandler handler, HttpServerOptions options)
    : core_(std::make_unique<HttpServerCore>(pool, std::move(handler), std::move(options))) {}

HttpServer::~HttpServer() {
  stop();
}

Status HttpServer::start(std::span<const HttpListenerConfig> listeners) {
  return core_->start(listeners);
}

void HttpServer::stop() {
  core_->stop();
}

void HttpServer::setDraining(bool draining) {
  core_->setDraining(draining);
}

uint16_t HttpServer::boundPort(size_t listener) const {
  return core_->boundPort(listener);
}

}  // namespace ot::controld
