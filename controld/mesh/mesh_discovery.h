// MESH_DNS (docs/mesh.md "Settings"): a name whose A or AAAA records are the other machines,
// resolved now and every MESH_DISCOVERY_MS with uv_getaddrinfo, which runs on libuv's thread pool
// (the loop thread never waits for DNS). Only INTERNAL_ADDRESS's family is asked for, since links
// are dialed from its IP; each answer is handed over as "ip:port" at INTERNAL_ADDRESS's port.
// Loop thread only.
#pragma once

#include <uv.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/log.h"

namespace ot::mesh {

class MeshDiscovery {
 public:
  using Found = std::function<void(const std::vector<std::string>& addresses)>;

  MeshDiscovery(uv_loop_t* loop, std::string name, uint16_t port, bool ipv6, int64_t everyMs,
                Found found);
  MeshDiscovery(const MeshDiscovery&) = delete;
  MeshDiscovery& operator=(const MeshDiscovery&) = delete;

  void start();
  // Stops the timer and cancels a running lookup (its callback then reports nothing). The object
  // must live until the loop has run the callbacks (the node's loop ends before it is destroyed).
  void close();

 private:
  void resolve();
  static void onResolved(uv_getaddrinfo_t* request, int status, addrinfo* result);

  uv_loop_t* loop_;
  std::string name_;
  uint16_t port_;
  bool ipv6_;
  int64_t everyMs_;
  Found found_;
  uv_timer_t timer_{};
  uv_getaddrinfo_t request_{};
  bool running_ = false;
  bool closed_ = false;
  log::Logger log_{"controld.mesh"};
};

}  // namespace ot::mesh
