// Listening sockets opened with plain POSIX calls rather than uv_listen, because the servers
// (controld's HTTP server, relayd's listeners) must be able to stop accepting for a while (out of
// descriptors) and libuv's listen cannot be paused: they watch the descriptor with a uv_poll_t
// and accept themselves.
//
// A ListenSocket owns its descriptor and, for a unix socket, the socket file it created: both go
// away with it (the file only if it is still the one we bound, not a successor's). Owner thread
// while opening; afterwards whoever holds it, typically the loop that polls it.
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <string>

#include "common/config.h"
#include "common/result.h"

namespace ot::net {

// What one accept(2) on a listening socket gave, sorted by what the accepting loop does next.
enum class AcceptStatus {
  kAccepted,        // `fd` is a new non-blocking, close-on-exec connection
  kNoneWaiting,     // the backlog is empty: wait for the next readiness event
  kSkipped,         // that connection failed in the backlog (or a signal came): try the next one
  kOutOfResources,  // EMFILE, ENFILE, ENOBUFS, ENOMEM: every try fails now; pause accepting
  kFailed,          // anything else, likely to repeat: count it and pause rather than spin
};

struct Accepted {
  AcceptStatus status = AcceptStatus::kNoneWaiting;
  int fd = -1;
  int error = 0;  // errno, for kSkipped, kOutOfResources and kFailed
};

inline constexpr int kDefaultListenBacklog = 16384;  // capped by the kernel's somaxconn

class ListenSocket {
 public:
  ListenSocket() = default;
  ~ListenSocket();
  ListenSocket(ListenSocket&& other) noexcept;
  ListenSocket& operator=(ListenSocket&& other) noexcept;
  ListenSocket(const ListenSocket&) = delete;
  ListenSocket& operator=(const ListenSocket&) = delete;

  // TCP: binds host:port (a name is resolved; port 0 picks a free port) with SO_REUSEADDR.
  // Unix: removes an existing socket file only when nothing answers on it (a stale file left by a
  // crash), refuses a path that exists and is not a socket, and makes the socket 0660 before it
  // starts listening, so nobody connects in the moment it has the default mode.
  // The descriptor is non-blocking and close-on-exec.
  [[nodiscard]] static Result<ListenSocket> open(const config::ListenAddress& address,
                                                 int backlog = kDefaultListenBacklog);

  // One non-blocking accept4. Linux passes network errors that a pending connection already met
  // on to accept (accept(2)); those only cost that connection, so they are kSkipped.
  [[nodiscard]] Accepted accept(sockaddr_storage* peer) const;

  [[nodiscard]] int fd() const { return fd_; }
  [[nodiscard]] bool isUnix() const { return !unixPath_.empty(); }
  // TCP: the port bound (the one picked for port 0). Unix: 0.
  [[nodiscard]] uint16_t port() const { return port_; }
  // For logs: "127.0.0.1:8080", "unix:/run/opentunnel/api.sock".
  [[nodiscard]] const std::string& name() const { return name_; }

 private:
  void reset();

  int fd_ = -1;
  uint16_t port_ = 0;
  std::string name_;
  std::string unixPath_;  // set only for a unix socket this object created
  dev_t unixDevice_ = 0;  // identity of that socket file, checked before unlinking it
  ino_t unixInode_ = 0;
};

}  // namespace ot::net
