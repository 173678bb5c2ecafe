// Keeps a second controld from taking over the unix socket of a running one. gRPC unlinks
// whatever is at a unix socket's path before it binds, so without this a second process would
// silently steal the socket. The lock is an flock(LOCK_EX | LOCK_NB) on "<socket>.lock", held
// for as long as the SocketLock lives; the kernel releases it when the process dies, so a socket
// file nobody holds the lock for is stale (a crash) and is removed. The lock file itself is never
// deleted: unlinking a lock file lets two processes hold "the" lock at once.
#pragma once

#include <string>

#include "common/result.h"

namespace ot::controld {

class SocketLock {
 public:
  // Takes the lock and removes a stale socket file. kConflict (with the holder's pid when it
  // wrote one) while another process holds the lock; kInvalid when the path is too long for a
  // unix socket, or names something that is not a socket; kUnavailable when the lock file cannot
  // be opened (a missing directory, permissions).
  [[nodiscard]] static Result<SocketLock> acquire(const std::string& socketPath);

  SocketLock(SocketLock&& other) noexcept;
  SocketLock& operator=(SocketLock&& other) noexcept;
  SocketLock(const SocketLock&) = delete;
  SocketLock& operator=(const SocketLock&) = delete;
  ~SocketLock();  // releases the lock

  [[nodiscard]] const std::string& lockPath() const { return lockPath_; }

 private:
  SocketLock(int fd, std::string lockPath) : fd_(fd), lockPath_(std::move(lockPath)) {}

  int fd_ = -1;
  std::string lockPath_;
};

}  // namespace ot::controld
