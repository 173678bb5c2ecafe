#include "controld/mesh/mesh_discovery.h"

#include <arpa/inet.h>

#include "controld/mesh/mesh_settings.h"

namespace ot::mesh {
namespace {

// The IP of a resolved address, without its port.
std::string ipOf(const sockaddr* address) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* bytes =
      address->sa_family == AF_INET6
          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr)
          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(address)->sin_addr);
  inet_ntop(address->sa_family, bytes, text, sizeof(text));
  return text;
}

}  // namespace

MeshDiscovery::MeshDiscovery(uv_loop_t* loop, std::string name, uint16_t port, bool ipv6,
                             int64_t everyMs, Found found)
    : loop_(loop),
      name_(std::move(name)),
      port_(port),
      ipv6_(ipv6),
      everyMs_(everyMs),
      found_(std::move(found)) {
  uv_timer_init(loop_, &timer_);
  timer_.data = this;
  request_.data = this;
}

void MeshDiscovery::start() {
  uv_timer_start(
      &timer_, [](uv_timer_t* timer) { static_cast<MeshDiscovery*>(timer->data)->resolve(); }, 0,
      static_cast<uint64_t>(everyMs_));
}

void MeshDiscovery::close() {
  if (closed_) return;
  closed_ = true;
  if (running_) uv_cancel(reinterpret_cast<uv_req_t*>(&request_));
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
}

void MeshDiscovery::resolve() {
  if (closed_ || running_) return;  // a slow resolver: the next round waits for this one
  addrinfo hints{};
  hints.ai_family = ipv6_ ? AF_INET6 : AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  running_ = uv_getaddrinfo(loop_, &request_, onResolved, name_.c_str(), nullptr, &hints) == 0;
}

void MeshDiscovery::onResolved(uv_getaddrinfo_t* request, int status, addrinfo* result) {
  auto* self = static_cast<MeshDiscovery*>(request->data);
  self->running_ = false;
  std::vector<std::string> addresses;
  for (const addrinfo* at = result; status == 0 && at != nullptr; at = at->ai_next) {
    addresses.push_back(HostPort{ipOf(at->ai_addr), self->port_}.toString());
  }
  uv_freeaddrinfo(result);
  if (self->closed_) return;
  if (status != 0) {
    self->log_.warn("MESH_DNS lookup failed",
                    {{"name", self->name_}, {"error", uv_strerror(status)}});
    return;
  }
  self->found_(addresses);
}

}  // namespace ot::mesh
