// Test helpers for the mesh node (tests/controld/mesh_node_test.cc): real sockets on 127.0.0.x.
//  - FakeRelayd plays relayd's part for a node's inbound links: it accepts TCP on the node's
//    internal address, reads the first line and hands the socket over on MESH_HANDOFF_SOCKET with
//    sendHandoff (the real protocol; relayd's internal listener does this in production).
//  - RawPeer is a hand-driven mesh peer with blocking sockets: it runs the real handshake
//    (MeshDialer / MeshAcceptor) and writes and reads frames, so a test can send what a real node
//    never would (a gap, a wrong address, silence) and see everything the node sends.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "common/fd_handoff.h"
#include "common/mesh_handshake.h"
#include "controld/mesh/frame_reader.h"
#include "controld/mesh/link_frames.h"

namespace ot::mesh::testing {

inline bool waitFor(const std::function<bool()>& done, int timeoutMs = 10'000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

inline sockaddr_in ipv4(const std::string& ip, uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  inet_pton(AF_INET, ip.c_str(), &address.sin_addr);
  return address;
}

// A listening TCP socket on ip:port (port 0: the kernel's choice, written back to `port`).
inline int listenTcp(const std::string& ip, uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address = ipv4(ip, port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(fd, 64) != 0) {
    ::close(fd);
    return -1;
  }
  socklen_t length = sizeof(address);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  port = ntohs(address.sin_port);
  return fd;
}

inline bool readable(int fd, int timeoutMs) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeoutMs) > 0;
}

inline int acceptWithin(int listenFd, int timeoutMs) {
  if (!readable(listenFd, timeoutMs)) return -1;
  return ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
}

inline std::string endpoint(int fd, bool peer) {
  sockaddr_in address{};
  socklen_t length = sizeof(address);
  if (peer) {
    ::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length);
  } else {
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  }
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &address.sin_addr, text, sizeof(text));
  return std::string(text) + ":" + std::to_string(ntohs(address.sin_port));
}

class FakeRelayd {
 public:
  // Listens on ip:port now (port 0: any; port() is the node's internal port); serve() once the
  // node listens.
  explicit FakeRelayd(const std::string& ip, uint16_t port = 0)
      : port_(port), listenFd_(listenTcp(ip, port_)) {}
  ~FakeRelayd() {
    stop();
    ::close(listenFd_);
  }
  [[nodiscard]] uint16_t port() const { return port_; }
  [[nodiscard]] int handedOver() const { return handedOver_.load(); }

  bool serve(const std::string& handoffSocket) {
    channel_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, handoffSocket.c_str(), sizeof(address.sun_path) - 1);
    if (::connect(channel_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      return false;
    }
    thread_ = std::thread([this] { run(); });
    return true;
  }

  void stop() {
    if (!thread_.joinable()) return;
    const uint64_t one = 1;
    (void)!::write(stopFd_, &one, sizeof(one));
    thread_.join();
    ::close(channel_);
  }

 private:
  void run() {
    for (;;) {
      pollfd fds[2] = {{listenFd_, POLLIN, 0}, {stopFd_, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) continue;
      if (fds[1].revents != 0) return;
      const int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      // relayd reads the first line (at most 1 KiB) before it knows whose connection it is.
      std::string prefix;
      char byte = 0;
      while (prefix.size() < 1024 && readable(fd, 5'000) && ::read(fd, &byte, 1) == 1) {
        prefix += byte;
        if (byte == '\n') break;
      }
      Handoff handoff;
      handoff.kind = HandoffKind::kMeshLink;
      handoff.peerAddress = endpoint(fd, true);
      handoff.localAddress = endpoint(fd, false);
      handoff.prefix.assign(prefix.begin(), prefix.end());
      if (sendHandoff(channel_, fd, handoff).ok()) ++handedOver_;
      ::close(fd);
    }
  }

  uint16_t port_ = 0;
  int listenFd_;
  int channel_ = -1;
  int stopFd_ = ::eventfd(0, EFD_CLOEXEC);
  std::atomic<int> handedOver_{0};
  std::thread thread_;
};

// One connection of a hand-driven peer. Everything the node sends is kept in received().
class RawPeer {
 public:
  RawPeer(std::string token, std::string machine)
      : token_(std::move(token)), machine_(std::move(machine)) {}
  ~RawPeer() { closeSocket(); }

  // Connects from `sourceIp` to ip:port and proves the secret as the dialer.
  bool dial(const std::string& sourceIp, const std::string& ip, uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in source = ipv4(sourceIp, 0);
    sockaddr_in target = ipv4(ip, port);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&source), sizeof(source)) != 0 ||
        ::connect(fd_, reinterpret_cast<sockaddr*>(&target), sizeof(target)) != 0) {
      return false;
    }
    MeshDialer dialer(token_, machine_, *randomNonce());
    if (!writeAll(dialer.openingLine())) return false;
    return drive([&](std::string_view bytes) { return dialer.feed(bytes); }, dialer);
  }

  // Takes a connection the node dialed and proves the secret as the acceptor.
  bool accept(int fd) {
    fd_ = fd;
    MeshAcceptor acceptor(token_, machine_, *randomNonce());
    return drive([&](std::string_view bytes) { return acceptor.feed(bytes); }, acceptor);
  }

  bool send(const Frame& frame) { return writeAll(encodeFrame(frame)); }
  bool sendEncoded(const std::string& bytes) { return writeAll(bytes); }

  // The next frame from the node within `timeoutMs`, pings skipped when asked.
  std::optional<Frame> next(int timeoutMs = 5'000, bool skipPings = true) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    for (;;) {
      ReadResult result = reader_.next();
      if (result.status == ReadStatus::kFrame) {
        if (skipPings && std::holds_alternative<Ping>(result.frame.body)) continue;
        return std::move(result.frame);
      }
      if (result.status == ReadStatus::kError) return std::nullopt;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0 || !readSome(static_cast<int>(left))) return std::nullopt;
    }
  }

  // Whether the node closed the connection within `timeoutMs` (reading and keeping what came).
  bool closedByNode(int timeoutMs) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
    while (std::chrono::steady_clock::now() < deadline) {
      if (!readable(fd_, 20)) continue;
      char buffer[4096];
      const ssize_t n = ::read(fd_, buffer, sizeof(buffer));
      if (n <= 0) return true;
      received_.append(buffer, static_cast<size_t>(n));
      reader_.feed(std::string_view(buffer, static_cast<size_t>(n)));
    }
    return false;
  }

  void closeSocket() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  [[nodiscard]] const std::string& received() const { return received_; }
  [[nodiscard]] const std::string& peerMachine() const { return peerMachine_; }

 private:
  bool writeAll(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  bool readSome(int timeoutMs) {
    if (!readable(fd_, timeoutMs)) return false;
    char buffer[65536];
    const ssize_t n = ::read(fd_, buffer, sizeof(buffer));
    if (n <= 0) return false;
    received_.append(buffer, static_cast<size_t>(n));
    reader_.feed(std::string_view(buffer, static_cast<size_t>(n)));
    return true;
  }

  template <typename Feed>
  bool drive(Feed feed, HandshakeBase& handshake) {
    for (;;) {
      if (!readable(fd_, 5'000)) return false;
      char buffer[4096];
      const ssize_t n = ::read(fd_, buffer, sizeof(buffer));
      if (n <= 0) return false;
      received_.append(buffer, static_cast<size_t>(n));
      const HandshakeStep step = feed(std::string_view(buffer, static_cast<size_t>(n)));
      if (step.state == HandshakeState::kRefused) return false;
      if (!step.send.empty() && !writeAll(step.send)) return false;
      if (step.state == HandshakeState::kProven) {
        peerMachine_ = handshake.peerMachineId();
        reader_.feed(handshake.takeLeftover());
        return true;
      }
    }
  }

  std::string token_;
  std::string machine_;
  int fd_ = -1;
  std::string received_;
  std::string peerMachine_;
  FrameReader reader_;
};

}  // namespace ot::mesh::testing
