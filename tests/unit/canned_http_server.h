// Test helper: a blocking HTTP/1.1 server for the tests of HTTP clients (common/curl_http,
// otunnel's API client).
#pragma once

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ot::testing {

// A blocking HTTP/1.1 server on 127.0.0.1:0 answering each connection with the next canned
// response, recording the requests. It serves exactly the responses given, then stops; every
// wait has a deadline so a broken client fails the test instead of hanging it.
class CannedServer {
 public:
  explicit CannedServer(std::vector<std::string> responses) : responses_(std::move(responses)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listener_, 8) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~CannedServer() {
    thread_.join();
    ::close(listener_);
  }

  [[nodiscard]] uint16_t port() const { return port_; }
  [[nodiscard]] std::vector<std::string> requests() {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void serve() {
    for (const std::string& response : responses_) {
      pollfd ready{listener_, POLLIN, 0};
      if (::poll(&ready, 1, 10'000) != 1) return;
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      std::string request = readRequest(fd);
      {
        std::lock_guard lock(mutex_);
        requests_.push_back(std::move(request));
      }
      size_t sent = 0;
      while (sent < response.size()) {
        const ssize_t n = ::send(fd, response.data() + sent, response.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) break;
        sent += static_cast<size_t>(n);
      }
      ::close(fd);
    }
  }

  static std::string readRequest(int fd) {
    std::string data;
    char buffer[4096];
    while (true) {
      const size_t end = data.find("\r\n\r\n");
      if (end != std::string::npos) {
        size_t body = 0;
        const size_t header = data.find("Content-Length: ");
        if (header != std::string::npos && header < end) {
          body = std::stoul(data.substr(header + 16));
        }
        if (data.size() >= end + 4 + body) return data;
      }
      pollfd ready{fd, POLLIN, 0};
      if (::poll(&ready, 1, 10'000) != 1) return data;
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n <= 0) return data;
      data.append(buffer, static_cast<size_t>(n));
    }
  }

  std::vector<std::string> responses_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::vector<std::string> requests_;
};

inline std::string answer(int status, const std::string& body, const std::string& extra = "") {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\n" + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace ot::testing
