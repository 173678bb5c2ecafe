// The yardstick for relayd's CPU per attach: full TLS handshakes (no resumption, no upgrade, no
// attach) against a bare TLS server, e.g. `openssl s_server` pinned to relayd's core. Each
// connection does TCP connect, the client handshake with the same context and SNI the bridges
// use, and closes once it completes. `concurrency` run at once until `count` are done. Loop
// thread only.
#pragma once

#include <netinet/in.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <string>

#include "common/tls_engine.h"

namespace ot::load {

struct BareHandshakeRun {
  uint64_t completed = 0;
  uint64_t failed = 0;
};

// Starts the run on `loop`; `done` is called once all `count` have completed or failed.
void startBareHandshakes(uv_loop_t* loop, sockaddr_in target, std::string serverName,
                         tls::SslCtxPtr context, uint64_t count, unsigned concurrency,
                         std::function<void(const BareHandshakeRun&)> done);

}  // namespace ot::load
