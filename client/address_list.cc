#include "client/address_list.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/address_resolver.h"

namespace ot::client {

std::string ipText(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    sockaddr_in v4{};
    std::memcpy(&v4, &address, sizeof v4);
    uv_ip4_name(&v4, host, sizeof host);
    return host;
  }
  if (address.ss_family == AF_INET6) {
    sockaddr_in6 v6{};
    std::memcpy(&v6, &address, sizeof v6);
    uv_ip6_name(&v6, host, sizeof host);
    return host;
  }
  return {};
}

std::vector<std::string> distinctAddresses(const addrinfo* result) {
  std::vector<std::string> out;
  for (const addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) ||
        ai->ai_addrlen > sizeof(sockaddr_storage)) {
      continue;
    }
    sockaddr_storage address{};
    std::memcpy(&address, ai->ai_addr, ai->ai_addrlen);
    std::string text = ipText(address);
    if (!text.empty() && std::find(out.begin(), out.end(), text) == out.end()) {
      out.push_back(std::move(text));
    }
  }
  return out;
}

AddressListQuery* AddressListQuery::resolve(uv_loop_t* loop, const std::string& host,
                                            Callback callback) {
  if (auto address = resolveWithoutDns(host, 0)) {
    callback(0, {ipText(*address)});
    return nullptr;
  }
  auto* query = new AddressListQuery(std::move(callback));
  query->req_.data = query;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  const int rc = uv_getaddrinfo(loop, &query->req_, &AddressListQuery::onResolved, host.c_str(),
                                nullptr, &hints);
  if (rc != 0) {
    Callback failed = std::move(query->callback_);
    delete query;
    failed(rc, {});
    return nullptr;
  }
  return query;
}

void AddressListQuery::cancel() {
  callback_ = nullptr;
  (void)uv_cancel(reinterpret_cast<uv_req_t*>(&req_));  // a running lookup just finds no one
}

void AddressListQuery::onResolved(uv_getaddrinfo_t* req, int status, addrinfo* result) {
  auto* self = static_cast<AddressListQuery*>(req->data);
  Callback callback = std::move(self->callback_);
  std::vector<std::string> addresses;
  if (status == 0) {
    addresses = distinctAddresses(result);
    if (addresses.empty()) status = UV_EAI_NODATA;
  }
  uv_freeaddrinfo(result);
  delete self;
  if (callback) callback(status, std::move(addresses));
}

}  // namespace ot::client
