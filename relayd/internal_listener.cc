#include "relayd/internal_listener.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/fd_handoff.h"
#include "common/log.h"
#include "common/mesh_proof.h"
#include "relayd/listener.h"
#include "relayd/mesh_route_table.h"
#include "relayd/relay_context.h"
#include "relayd/relay_metrics.h"
#include "relayd/timer_wheel.h"

namespace ot::relayd {
namespace {

const log::Logger kInternalListenerLog("relayd.internal");

constexpr std::string_view kConnectionsName = "opentunnel_mesh_internal_connections_total";
constexpr std::string_view kConnectionsHelp =
    "Connections taken on the internal listener, by what their first line made them.";
constexpr std::string_view kRefusedName = "opentunnel_mesh_internal_refused_total";
constexpr std::string_view kRefusedHelp =
    "Connections closed unserved on the internal listener, by reason.";

// "<METHOD> <target> HTTP/1.x", the request line of a route check (or any HTTP request: controld
// answers what it does not serve).
bool isHttpRequestLine(std::string_view line) {
  if (line.ends_with('\r')) line.remove_suffix(1);
  const size_t methodEnd = line.find(' ');
  if (methodEnd == 0 || methodEnd == std::string_view::npos || methodEnd > 16) return false;
  for (const char c : line.substr(0, methodEnd)) {
    if (c < 'A' || c > 'Z') return false;
  }
  const size_t targetEnd = line.rfind(' ');
  if (targetEnd <= methodEnd + 1) return false;
  const std::string_view version = line.substr(targetEnd + 1);
  return version == "HTTP/1.1" || version == "HTTP/1.0";
}

std::string localAddressOf(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return {};
  return formatSocketAddress(address);
}

}  // namespace

// The SOCK_SEQPACKET connection to controld's MESH_HANDOFF_SOCKET, opened when first needed and
// again after controld restarted (a send on the old one fails). Outside the anonymous namespace:
// Impl holds one, and g++ warns about a member of internal type in a unity build.
class HandoffChannel {
 public:
  explicit HandoffChannel(std::string path) : path_(std::move(path)) {}
  ~HandoffChannel() { disconnect(); }
  HandoffChannel(const HandoffChannel&) = delete;
  HandoffChannel& operator=(const HandoffChannel&) = delete;

  Status send(int connectionFd, const mesh::Handoff& handoff) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (fd_ < 0) {
        Status connected = connect();
        if (!connected) return connected;
      }
      Status sent = mesh::sendHandoff(fd_, connectionFd, handoff);
      if (sent || sent.error().kind != ErrorKind::kUnavailable) return sent;
      // Full, or controld went away: a fresh connection tells which (a full one fails again).
      disconnect();
    }
    return Error{ErrorKind::kUnavailable, "controld does not take the connection"};
  }

 private:
  Status connect() {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (path_.size() >= sizeof(address.sun_path)) {
      return Error{ErrorKind::kInvalid, "MESH_HANDOFF_SOCKET path too long"};
    }
    std::memcpy(address.sun_path, path_.data(), path_.size());
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return Error{ErrorKind::kUnavailable, std::strerror(errno)};
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
      const int error = errno;
      ::close(fd);
      return Error{ErrorKind::kUnavailable, std::string("connect: ") + std::strerror(error)};
    }
    fd_ = fd;
    return Ok{};
  }
  void disconnect() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  std::string path_;
  int fd_ = -1;
};

struct InternalListener::Impl {
  struct Connection {
    Connection(Impl& ownerIn, int fdIn)
        : owner(ownerIn), fd(fdIn), timer(&Connection::onTimer, this) {}
    static void onTimer(TimerEntry*, void* self) {
      static_cast<Connection*>(self)->owner.refuse(*static_cast<Connection*>(self), "timeout");
    }
    Impl& owner;
    int fd;
    uv_poll_t poll{};
    TimerEntry timer;
    std::vector<uint8_t> buffer;
    std::string peer;
  };

  Impl(RelayContext& contextIn, InternalListenerOptions optionsIn)
      : context(contextIn),
        options(std::move(optionsIn)),
        channel(options.handoffSocketPath),
        registry(contextIn.metrics.registry) {
    // The outcomes known in advance exist from the start (zeros, not gaps, on dashboards); the
    // proof errors of refused liveness questions appear when first counted.
    for (const char* kind : {"alive", "mesh", "http", "forward"}) {
      (void)registry.counter(std::string(kConnectionsName), std::string(kConnectionsHelp),
                             {{"kind", kind}});
    }
    for (const char* reason :
         {"too_many_waiting", "timeout", "line_too_long", "unknown_line", "forward_not_wired",
          "control_unavailable", "closed_before_line", "error"}) {
      (void)registry.counter(std::string(kRefusedName), std::string(kRefusedHelp),
                             {{"reason", reason}});
    }
  }

  void accept(int fd, const sockaddr_storage& peer) {
    if (waiting.size() >= mesh::kMaxPreAuthConnections) {
      ::close(fd);
      count(kRefusedName, kRefusedHelp, "reason", "too_many_waiting");
      return;
    }
    auto* connection = new Connection(*this, fd);
    connection->peer = formatSocketAddress(peer);
    if (uv_poll_init(context.loop, &connection->poll, fd) != 0) {
      ::close(fd);
      delete connection;
      count(kRefusedName, kRefusedHelp, "reason", "error");
      return;
    }
    connection->poll.data = connection;
    waiting.insert(connection);
    context.wheel.schedule(connection->timer, context.nowMs(),
                           static_cast<uint64_t>(mesh::kPreAuthTimeoutMs));
    uv_poll_start(&connection->poll, UV_READABLE, &Impl::onReadable);
  }

  static void onReadable(uv_poll_t* handle, int status, int) {
    auto* connection = static_cast<Connection*>(handle->data);
    Impl& self = connection->owner;
    if (status < 0) {
      self.refuse(*connection, "error");
      return;
    }
    std::vector<uint8_t>& buffer = connection->buffer;
    for (;;) {
      const size_t room = mesh::kMaxHandoffPrefix - buffer.size();
      if (room == 0) break;
      const size_t before = buffer.size();
      buffer.resize(before + std::min<size_t>(room, 16 * 1024));
      const ssize_t got = ::read(connection->fd, buffer.data() + before, buffer.size() - before);
      if (got <= 0) {
        buffer.resize(before);
        if (got == 0) {
          self.refuse(*connection, "closed_before_line");
          return;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN) break;
        self.refuse(*connection, "error");
        return;
      }
      buffer.resize(before + static_cast<size_t>(got));
    }
    const std::string_view text(reinterpret_cast<const char*>(buffer.data()), buffer.size());
    const mesh::LineScan scan = mesh::scanLine(text);
    if (scan.status == mesh::LineStatus::kNeedMore) return;
    if (scan.status == mesh::LineStatus::kTooLong) {
      self.refuse(*connection, "line_too_long");
      return;
    }
    self.decide(*connection, text.substr(0, scan.length));
  }

  void decide(Connection& connection, std::string_view line) {
    if (line.starts_with("OPENTUNNEL-ALIVE")) {
      answerAlive(connection, line);
    } else if (line.starts_with("OPENTUNNEL-MESH")) {
      handOff(connection, mesh::HandoffKind::kMeshLink, "mesh");
    } else if (line.starts_with("OPENTUNNEL-FORWARD")) {
      acceptForward(connection, line);
    } else if (isHttpRequestLine(line)) {
      handOff(connection, mesh::HandoffKind::kInternalHttp, "http");
    } else {
      refuse(connection, "unknown_line");
    }
  }

  void answerAlive(Connection& connection, std::string_view line) {
    const int64_t now = unixNowMs();
    auto question = mesh::verifyAliveQuestion(line, options.secret, options.machineId, now);
    if (!question) {
      kInternalListenerLog.info("liveness question refused",
                                {{"peer", connection.peer},
                                 {"reason", std::string(mesh::proofErrorName(question.error()))}});
      refuse(connection, std::string(mesh::proofErrorName(question.error())));
      return;
    }
    const mesh::AliveState state =
        options.aliveState ? options.aliveState() : mesh::AliveState::kServing;
    const std::string answer = mesh::buildAliveAnswer(options.secret, *question, state, now);
    // A fresh socket's send buffer takes a line of this size whole; a short write means the peer
    // is gone, and the asker then reads no answer, which it treats as a dead machine anyway.
    (void)::send(connection.fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    count(kConnectionsName, kConnectionsHelp, "kind", "alive");
    finish(connection);
  }

  void acceptForward(Connection& connection, std::string_view line) {
    if (!options.acceptForward) {
      refuse(connection, "forward_not_wired");
      return;
    }
    const std::string_view peerHost = hostOfAddress(connection.peer);
    const mesh::LinkedSenderCheck linked = [&](std::string_view sender) {
      return options.linkedSender && options.linkedSender(sender, peerHost);
    };
    const int64_t now = options.wallClock ? options.wallClock() : unixNowMs();
    auto header =
        mesh::verifyForwardHeader(line, options.secret, options.machineId, now, linked, nonces);
    if (!header) {
      const std::string reason(mesh::proofErrorName(header.error()));
      kInternalListenerLog.info("forward refused", {{"peer", connection.peer}, {"reason", reason}});
      refuse(connection, reason);
      return;
    }
    // The descriptor goes on as a stream; relayd's poll handle lets go of its own copy.
    const int fd = ::dup(connection.fd);
    if (fd < 0) {
      refuse(connection, "error");
      return;
    }
    const std::vector<uint8_t> rest(
        connection.buffer.begin() + static_cast<ptrdiff_t>(line.size()) + 1,
        connection.buffer.end());
    count(kConnectionsName, kConnectionsHelp, "kind", "forward");
    finish(connection);
    options.acceptForward(fd, *header, rest);
  }

  void handOff(Connection& connection, mesh::HandoffKind kind, const char* kindName) {
    mesh::Handoff handoff;
    handoff.kind = kind;
    handoff.peerAddress = connection.peer;
    handoff.localAddress = localAddressOf(connection.fd);
    handoff.prefix = std::move(connection.buffer);
    Status sent = channel.send(connection.fd, handoff);
    if (!sent) {
      kInternalListenerLog.warn(
          "cannot hand a connection to controld",
          {{"kind", kindName}, {"peer", connection.peer}, {"error", sent.error().message}});
      refuse(connection, "control_unavailable");
      return;
    }
    count(kConnectionsName, kConnectionsHelp, "kind", kindName);
    finish(connection);  // closes relayd's copy; controld holds its own
  }

  void refuse(Connection& connection, const std::string& reason) {
    count(kRefusedName, kRefusedHelp, "reason", reason);
    finish(connection);
  }

  // Stops watching the connection and closes relayd's descriptor once libuv let go of it.
  void finish(Connection& connection) {
    if (waiting.erase(&connection) == 0) return;
    connection.timer.cancel();
    uv_poll_stop(&connection.poll);
    uv_close(reinterpret_cast<uv_handle_t*>(&connection.poll), [](uv_handle_t* handle) {
      auto* closed = static_cast<Connection*>(handle->data);
      ::close(closed->fd);
      delete closed;
    });
  }

  void count(std::string_view name, std::string_view help, const char* label,
             const std::string& value) {
    registry.counter(std::string(name), std::string(help), {{label, value}}).Increment();
  }

  RelayContext& context;
  InternalListenerOptions options;
  HandoffChannel channel;
  metrics::Metrics& registry;
  std::unique_ptr<Listener> listener;
  std::unordered_set<Connection*> waiting;
  mesh::NonceWindow nonces;  // forwards' nonces seen within their validity
};

Result<std::unique_ptr<InternalListener>> InternalListener::open(RelayContext& context,
                                                                 InternalListenerOptions options) {
  auto impl = std::make_unique<Impl>(context, std::move(options));
  Impl* raw = impl.get();
  auto listener = Listener::open(
      context.loop, raw->options.address, "internal",
      [raw](int fd, const sockaddr_storage& peer) { raw->accept(fd, peer); }, &context.metrics);
  if (!listener) return listener.error();
  impl->listener = std::move(listener).value();
  kInternalListenerLog.info("internal listener up",
                            {{"address", raw->options.address.toString()},
                             {"port", std::to_string(impl->listener->port())},
                             {"handoff_socket", raw->options.handoffSocketPath}});
  return std::unique_ptr<InternalListener>(new InternalListener(std::move(impl)));
}

InternalListener::InternalListener(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

InternalListener::~InternalListener() {
  close();
  const std::vector<Impl::Connection*> left(impl_->waiting.begin(), impl_->waiting.end());
  for (Impl::Connection* connection : left) impl_->finish(*connection);
}

uint16_t InternalListener::port() const {
  return impl_->listener ? impl_->listener->port() : 0;
}

void InternalListener::close() {
  if (impl_->listener) impl_->listener->close();
}

}  // namespace ot::relayd
