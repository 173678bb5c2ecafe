#include "common/listen_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace ot::net {
namespace {

Error failure(const std::string& what, const std::string& name, int error) {
  return Error{ErrorKind::kUnavailable, what + " " + name + ": " + std::strerror(error)};
}

// Fills a sockaddr_un; false when the path does not fit (sun_path includes the terminator).
bool unixAddress(const std::string& path, sockaddr_un& address) {
  std::memset(&address, 0, sizeof(address));
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) return false;
  std::memcpy(address.sun_path, path.data(), path.size());
  return true;
}

int bindAndListen(int fd, const sockaddr* address, socklen_t length, int backlog) {
  if (::bind(fd, address, length) != 0) return errno;
  if (::listen(fd, backlog) != 0) return errno;
  return 0;
}

}  // namespace

Accepted ListenSocket::accept(sockaddr_storage* peer) const {
  socklen_t length = sizeof *peer;
  const int fd =
      ::accept4(fd_, reinterpret_cast<sockaddr*>(peer), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) return {AcceptStatus::kAccepted, fd, 0};
  const int error = errno;
  switch (error) {
    case EAGAIN:  // EWOULDBLOCK is the same value on Linux
      return {AcceptStatus::kNoneWaiting, -1, 0};
    case EINTR:
    case ECONNABORTED:
    case EPERM:  // a firewall rule refused this connection
    case EPROTO:
    case ENOPROTOOPT:
    case ENETDOWN:
    case ENETUNREACH:
    case EHOSTDOWN:
    case EHOSTUNREACH:
    case ENONET:
    case EOPNOTSUPP:
      return {AcceptStatus::kSkipped, -1, error};
    case EMFILE:
    case ENFILE:
    case ENOBUFS:
    case ENOMEM:
      return {AcceptStatus::kOutOfResources, -1, error};
    default:
      return {AcceptStatus::kFailed, -1, error};
  }
}

ListenSocket::~ListenSocket() {
  reset();
}

ListenSocket::ListenSocket(ListenSocket&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      port_(other.port_),
      name_(std::move(other.name_)),
      unixPath_(std::exchange(other.unixPath_, {})),
      unixDevice_(other.unixDevice_),
      unixInode_(other.unixInode_) {}

ListenSocket& ListenSocket::operator=(ListenSocket&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = std::exchange(other.fd_, -1);
    port_ = other.port_;
    name_ = std::move(other.name_);
    unixPath_ = std::exchange(other.unixPath_, {});
    unixDevice_ = other.unixDevice_;
    unixInode_ = other.unixInode_;
  }
  return *this;
}

void ListenSocket::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!unixPath_.empty()) {
    // Another instance may have replaced a stale-looking file since; leave its socket alone.
    struct stat info {};
    if (::lstat(unixPath_.c_str(), &info) == 0 && info.st_dev == unixDevice_ &&
        info.st_ino == unixInode_) {
      ::unlink(unixPath_.c_str());
    }
    unixPath_.clear();
  }
}

Result<ListenSocket> ListenSocket::open(const config::ListenAddress& address, int backlog) {
  ListenSocket socket;
  socket.name_ = address.toString();
  if (address.kind == config::ListenAddress::Kind::kUnix) {
    sockaddr_un unixAddr{};
    if (!unixAddress(address.path, unixAddr)) {
      return Error{ErrorKind::kInvalid, "unix socket path too long: " + address.path};
    }
    const auto* raw = reinterpret_cast<const sockaddr*>(&unixAddr);
    struct stat info {};
    if (::lstat(address.path.c_str(), &info) == 0) {
      if (!S_ISSOCK(info.st_mode)) {
        return Error{ErrorKind::kInvalid, address.path + " exists and is not a socket"};
      }
      // Non-blocking: a live server with a full backlog answers EAGAIN instead of stalling us.
      const int probe = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (probe < 0) return failure("socket for", socket.name_, errno);
      const int connected = ::connect(probe, raw, sizeof(unixAddr));
      const int probeError = errno;
      ::close(probe);
      if (connected == 0) {
        return Error{ErrorKind::kConflict, "another process is listening on " + address.path};
      }
      if (probeError != ECONNREFUSED && probeError != ENOENT) {
        return failure("probing", socket.name_, probeError);
      }
      if (probeError == ECONNREFUSED && ::unlink(address.path.c_str()) != 0 && errno != ENOENT) {
        return failure("removing stale socket", socket.name_, errno);
      }
    }
    socket.fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (socket.fd_ < 0) return failure("socket for", socket.name_, errno);
    if (::bind(socket.fd_, raw, sizeof(unixAddr)) != 0)
      return failure("binding", socket.name_, errno);
    if (::lstat(address.path.c_str(), &info) != 0) return failure("stat", socket.name_, errno);
    socket.unixPath_ = address.path;
    socket.unixDevice_ = info.st_dev;
    socket.unixInode_ = info.st_ino;
    // Before listen(): until then a connect is refused, so the umask's mode is never usable.
    if (::chmod(address.path.c_str(), 0660) != 0) return failure("chmod", socket.name_, errno);
    if (::listen(socket.fd_, backlog) != 0) return failure("listening on", socket.name_, errno);
    return socket;
  }

  if (address.kind != config::ListenAddress::Kind::kTcp) {
    return Error{ErrorKind::kInvalid, "listener is off"};
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(address.port);
  const int resolved = ::getaddrinfo(address.host.c_str(), port.c_str(), &hints, &found);
  if (resolved != 0) {
    return Error{ErrorKind::kInvalid,
                 "resolving " + socket.name_ + ": " + ::gai_strerror(resolved)};
  }
  int lastError = EADDRNOTAVAIL;
  for (const addrinfo* candidate = found; candidate != nullptr; candidate = candidate->ai_next) {
    const int fd = ::socket(candidate->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      lastError = errno;
      continue;
    }
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    lastError = bindAndListen(fd, candidate->ai_addr, candidate->ai_addrlen, backlog);
    if (lastError == 0) {
      socket.fd_ = fd;
      break;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (socket.fd_ < 0) return failure("binding", socket.name_, lastError);

  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (::getsockname(socket.fd_, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    return failure("getsockname", socket.name_, errno);
  }
  if (bound.ss_family == AF_INET) {
    sockaddr_in v4{};
    std::memcpy(&v4, &bound, sizeof(v4));
    socket.port_ = ntohs(v4.sin_port);
  } else if (bound.ss_family == AF_INET6) {
    sockaddr_in6 v6{};
    std::memcpy(&v6, &bound, sizeof(v6));
    socket.port_ = ntohs(v6.sin6_port);
  }
  if (address.port == 0) {
    config::ListenAddress picked = address;
    picked.port = socket.port_;
    socket.name_ = picked.toString();
  }
  return socket;
}

}  // namespace ot::net
