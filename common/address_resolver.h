// Turning a host and port into a socket address for uv_tcp_connect (TcpStream::connect: otunnel's
// relay connection and its local targets). Names equal to "localhost" or ending in ".localhost" are
// 127.0.0.1 without asking DNS (RFC 6761); IP literals are parsed; anything else goes through
// uv_getaddrinfo. Loop thread only.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace ot {

// "localhost" and names under ".localhost", in any case, with or without the trailing dot of a
// fully qualified spelling: always the loopback address (RFC 6761), without asking DNS.
[[nodiscard]] bool isLocalhostName(std::string_view host);

// The address when no DNS lookup is needed (*.localhost, IPv4 or IPv6 literal, "[v6]" too);
// nullopt means the name must be looked up.
[[nodiscard]] std::optional<sockaddr_storage> resolveWithoutDns(std::string_view host,
                                                                uint16_t port);

// One uv_getaddrinfo lookup. It owns itself: libuv always hands the request back (even after
// uv_cancel), and the object frees itself then. cancel() guarantees the callback never runs, so
// the object that started the query may go away right after cancelling.
class DnsQuery {
 public:
  // status 0 and the first stream address, or a libuv error code (and an empty address).
  using Callback = std::function<void(int status, const sockaddr_storage& address)>;

  // `host` resolved, with or without DNS: calls back at once (and returns nullptr) when no lookup
  // is needed or the lookup could not start (status = why), else returns the running query.
  [[nodiscard]] static DnsQuery* resolve(uv_loop_t* loop, const std::string& host, uint16_t port,
                                         const Callback& callback);
  // nullptr (and *error set) when the lookup could not even start.
  [[nodiscard]] static DnsQuery* start(uv_loop_t* loop, const std::string& host, uint16_t port,
                                       Callback callback, int* error);
  void cancel();

  DnsQuery(const DnsQuery&) = delete;
  DnsQuery& operator=(const DnsQuery&) = delete;

 private:
  explicit DnsQuery(Callback callback) : callback_(std::move(callback)) {}
  ~DnsQuery() = default;
  static void onResolved(uv_getaddrinfo_t* req, int status, addrinfo* result);

  uv_getaddrinfo_t req_{};
  Callback callback_;
};

// "127.0.0.1:8080" / "[::1]:443", for log lines and error texts.
[[nodiscard]] std::string formatAddress(const sockaddr_storage& address);

}  // namespace ot
