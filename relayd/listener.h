// A TCP listening socket on the relay's loop that accepts by itself (net::AcceptLoop, shared with
// controld's HTTP server), so that running out of descriptors pauses accepting instead of
// spinning: on EMFILE, ENFILE, ENOBUFS or ENOMEM the listener stops polling for 500 ms, counts
// opentunnel_accept_errors_total{error="emfile"} and logs at most every 10 s; an unknown error
// pauses too and counts {error="other"} (net::ListenSocket::accept sorts them). Backlog 16384
// (the kernel caps it at somaxconn).
//
// Loop thread only. The accepted descriptor is handed to `onAccept`, which owns it from then on
// (typically uv_tcp_open into a connection object). Non-blocking and close-on-exec are set.
#pragma once

#include <sys/socket.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/config.h"
#include "common/result.h"

namespace ot::relayd {

class RelayMetrics;

class Listener {
 public:
  using OnAccept = std::function<void(int fd, const sockaddr_storage& peer)>;

  // Binds and listens through net::ListenSocket (TCP with SO_REUSEADDR, or a unix socket whose
  // stale file is removed only when nothing answers on it). `name` is for logs ("tls", "http",
  // "metrics"). Port 0 picks a free port: see port().
  [[nodiscard]] static Result<std::unique_ptr<Listener>> open(uv_loop_t* loop,
                                                              const config::ListenAddress& address,
                                                              std::string name, OnAccept onAccept,
                                                              RelayMetrics* metrics);
  ~Listener();  // closes the socket (the poll handle is closed through the loop)
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  [[nodiscard]] uint16_t port() const { return port_; }
  [[nodiscard]] const std::string& name() const { return name_; }

  // Stops accepting and closes the listening socket (idempotent). Connections already accepted
  // are not affected.
  void close();

 private:
  struct Impl;
  explicit Listener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
  std::string name_;
};

// "a.b.c.d:port" or "[v6]:port"; IPv4-mapped IPv6 written as IPv4 (as the bridge protocol's
// visitor address wants). "" for anything else.
[[nodiscard]] std::string formatSocketAddress(const sockaddr_storage& address);

// Socket options every public TCP connection gets: TCP_NODELAY, SO_KEEPALIVE with 60 s idle /
// 10 s interval / 6 probes; `notSentLowat` > 0 also sets TCP_NOTSENT_LOWAT. Failures are ignored
// (a socket that cannot take them still works). Listener::open sets them on the listening socket,
// from which every accepted socket inherits them, so accept paths do not call this per socket.
void tuneSocket(int fd, int notSentLowat = 0);

}  // namespace ot::relayd
