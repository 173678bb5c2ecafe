// The yardstick for relayd's CPU per attach: TLS handshakes (no upgrade, no attach) against a
// bare TLS server, e.g. `openssl s_server` pinned to relayd's core. Each connection does TCP
// connect, the client handshake with the same context and SNI the bridges use, and closes once it
// completes. `concurrency` run at once until `count` are done. Loop thread only.
//
// Full handshakes on a context that keeps no sessions. With `resume` (the context keeps sessions,
// common/tls_sessions.h): one priming connection first waits for the server's session ticket
// (not counted), then every handshake offers it, as a bridge reconnecting does.
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
  uint64_t resumed = 0;  // of the completed, how many the server resumed
};

// Starts the run on `loop`; `done` is called once all `count` have completed or failed.
void startBareHandshakes(uv_loop_t* loop, sockaddr_in target, std::string serverName,
                         tls::SslCtxPtr context, uint64_t count, unsigned concurrency, bool resume,
                         std::function<void(const BareHandshakeRun&)> done);

}  // namespace ot::load
