// Every address a relay name resolves to (both families), for warm failover: otunnel keeps
// links on each of them at once. Names under .localhost are 127.0.0.1 and IP literals are
// themselves, without asking DNS (as the single-address resolver does: common/address_resolver.h).
// Loop thread only.
#pragma once

#include <uv.h>

#include <functional>
#include <string>
#include <vector>

namespace ot::client {

// The IP literal of a socket address (IPv6 without brackets); "" for other families.
[[nodiscard]] std::string ipText(const sockaddr_storage& address);

// Distinct IP literals of `result` in its order, IPv4 and IPv6 stream addresses only.
[[nodiscard]] std::vector<std::string> distinctAddresses(const addrinfo* result);

// One lookup of all addresses. Owns itself like DnsQuery: cancel() guarantees the callback never
// runs, so its starter may go away right after cancelling.
class AddressListQuery {
 public:
  // status 0 and at least one address, or a libuv error code and none.
  using Callback = std::function<void(int status, std::vector<std::string> addresses)>;

  // Calls back at once (returning nullptr) when no lookup is needed or it could not start.
  [[nodiscard]] static AddressListQuery* resolve(uv_loop_t* loop, const std::string& host,
                                                 Callback callback);
  void cancel();

  AddressListQuery(const AddressListQuery&) = delete;
  AddressListQuery& operator=(const AddressListQuery&) = delete;

 private:
  explicit AddressListQuery(Callback callback) : callback_(std::move(callback)) {}
  ~AddressListQuery() = default;
  static void onResolved(uv_getaddrinfo_t* req, int status, addrinfo* result);

  uv_getaddrinfo_t req_{};
  Callback callback_;
};

}  // namespace ot::client
