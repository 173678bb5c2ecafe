// Visitors through the load tool's own bridges: each connects to relayd's TLS port from a
// loopback source address, sends a real ClientHello for <id>.<domain> (made once per tunnel by
// OpenSSL), and waits for the bridge's echo of exactly those bytes (the time to its first byte
// back), then `rounds` round trips of 4 KiB, then closes. `concurrency` at once until `count` are
// done. Loop thread only.
#pragma once

#include <netinet/in.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tests/load/load_bridge.h"

namespace ot::load {

struct VisitorRun {
  uint64_t completed = 0;
  uint64_t failed = 0;
  double seconds = 0;
  std::vector<double> firstByteMs;  // per completed visitor
};

struct VisitorPlan {
  sockaddr_in relay{};
  std::string domain;
  std::vector<TunnelCredentials> tunnels;
  in_addr sourceBase{};
  int sources = 1;
  uint64_t count = 0;
  unsigned concurrency = 50;
  unsigned rounds = 5;
};

void startVisitors(uv_loop_t* loop, VisitorPlan plan, std::function<void(VisitorRun)> done);

}  // namespace ot::load
