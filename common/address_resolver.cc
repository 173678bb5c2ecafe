#include "common/address_resolver.h"

#include <cstring>
#include <string>
#include <utility>

#include "common/text.h"

namespace ot {

bool isLocalhostName(std::string_view host) {
  std::string name = toLower(host);
  if (!name.empty() && name.back() == '.') name.pop_back();  // a fully qualified spelling
  constexpr std::string_view kSuffix = ".localhost";
  return name == "localhost" || (name.size() > kSuffix.size() && name.ends_with(kSuffix));
}

std::optional<sockaddr_storage> resolveWithoutDns(std::string_view host, uint16_t port) {
  sockaddr_storage out{};
  if (isLocalhostName(host)) host = "127.0.0.1";
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const std::string text(host);
  if (text.find(':') == std::string::npos) {
    sockaddr_in v4{};
    if (uv_inet_pton(AF_INET, text.c_str(), &v4.sin_addr) != 0) return std::nullopt;
    if (uv_ip4_addr(text.c_str(), port, &v4) != 0) return std::nullopt;
    std::memcpy(&out, &v4, sizeof v4);
    return out;
  }
  sockaddr_in6 v6{};
  if (uv_ip6_addr(text.c_str(), port, &v6) != 0) return std::nullopt;
  std::memcpy(&out, &v6, sizeof v6);
  return out;
}

DnsQuery* DnsQuery::resolve(uv_loop_t* loop, const std::string& host, uint16_t port,
                            const Callback& callback) {
  if (auto address = resolveWithoutDns(host, port)) {
    callback(0, *address);
    return nullptr;
  }
  int error = 0;
  DnsQuery* query = start(loop, host, port, callback, &error);
  if (query == nullptr) callback(error, sockaddr_storage{});
  return query;
}

DnsQuery* DnsQuery::start(uv_loop_t* loop, const std::string& host, uint16_t port,
                          Callback callback, int* error) {
  auto* query = new DnsQuery(std::move(callback));
  query->req_.data = query;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_protocol = IPPROTO_TCP;
  const std::string service = std::to_string(port);
  const int rc = uv_getaddrinfo(loop, &query->req_, &DnsQuery::onResolved, host.c_str(),
                                service.c_str(), &hints);
  if (rc != 0) {
    delete query;
    if (error != nullptr) *error = rc;
    return nullptr;
  }
  return query;
}

void DnsQuery::cancel() {
  callback_ = nullptr;
  // Best effort: a lookup already running on the thread pool cannot be stopped; its callback
  // then finds no one to call and just frees the request.
  (void)uv_cancel(reinterpret_cast<uv_req_t*>(&req_));
}

void DnsQuery::onResolved(uv_getaddrinfo_t* req, int status, addrinfo* result) {
  auto* self = static_cast<DnsQuery*>(req->data);
  Callback callback = std::move(self->callback_);
  sockaddr_storage address{};
  if (status == 0) {
    status = UV_EAI_NODATA;
    for (const addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
      if ((ai->ai_family == AF_INET || ai->ai_family == AF_INET6) &&
          ai->ai_addrlen <= sizeof address) {
        std::memcpy(&address, ai->ai_addr, ai->ai_addrlen);
        status = 0;
        break;
      }
    }
  }
  uv_freeaddrinfo(result);
  delete self;
  if (callback) callback(status, address);
}

std::string formatAddress(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    sockaddr_in v4{};
    std::memcpy(&v4, &address, sizeof v4);
    uv_ip4_name(&v4, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(v4.sin_port));
  }
  if (address.ss_family == AF_INET6) {
    sockaddr_in6 v6{};
    std::memcpy(&v6, &address, sizeof v6);
    uv_ip6_name(&v6, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(v6.sin6_port));
  }
  return "?";
}

}  // namespace ot
