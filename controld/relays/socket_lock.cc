#include "controld/relays/socket_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace ot::controld {
namespace {

std::string errnoText(int error) {
  return std::strerror(error);
}

// What the holder wrote into the lock file (its pid), for the error message.
std::string readHolder(int fd) {
  char buffer[32] = {};
  const ssize_t got = pread(fd, buffer, sizeof(buffer) - 1, 0);
  if (got <= 0) return {};
  std::string text(buffer, static_cast<size_t>(got));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

void writePid(int fd) {
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd, 0) != 0) return;  // informational only
  (void)!pwrite(fd, pid.data(), pid.size(), 0);
}

}  // namespace

Result<SocketLock> SocketLock::acquire(const std::string& socketPath) {
  if (socketPath.empty() || socketPath.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return Error{ErrorKind::kInvalid, "gRPC socket path \"" + socketPath +
                                          "\" is empty or longer than a unix socket path may be (" +
                                          std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) +
                                          " bytes)"};
  }
  std::string lockPath = socketPath + ".lock";
  const int fd = open(lockPath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int error = errno;
    return Error{ErrorKind::kUnavailable,
                 "cannot open the lock file " + lockPath + ": " + errnoText(error)};
  }
  SocketLock lock(fd, std::move(lockPath));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    if (error == EWOULDBLOCK) {
      const std::string holder = readHolder(fd);
      return Error{ErrorKind::kConflict,
                   "another controld" + (holder.empty() ? std::string() : " (pid " + holder + ")") +
                       " is serving on " + socketPath + " (it holds " + lock.lockPath() + ")"};
    }
    return Error{ErrorKind::kUnavailable,
                 "cannot lock " + lock.lockPath() + ": " + errnoText(error)};
  }
  writePid(fd);

  struct stat status = {};
  if (lstat(socketPath.c_str(), &status) == 0) {
    if (!S_ISSOCK(status.st_mode)) {
      return Error{ErrorKind::kInvalid,
                   socketPath + " exists and is not a socket; refusing to replace it"};
    }
    // Nobody holds the lock, so no process serves on it: a leftover of one that died.
    if (unlink(socketPath.c_str()) != 0 && errno != ENOENT) {
      const int error = errno;
      return Error{ErrorKind::kUnavailable,
                   "cannot remove the stale socket " + socketPath + ": " + errnoText(error)};
    }
  } else if (errno != ENOENT) {
    const int error = errno;
    return Error{ErrorKind::kUnavailable, "cannot inspect " + socketPath + ": " + errnoText(error)};
  }
  return lock;
}

SocketLock::SocketLock(SocketLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), lockPath_(std::move(other.lockPath_)) {}

SocketLock& SocketLock::operator=(SocketLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    lockPath_ = std::move(other.lockPath_);
  }
  return *this;
}

SocketLock::~SocketLock() {
  if (fd_ >= 0) close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace ot::controld
