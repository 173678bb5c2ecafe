// Which API-domain connections get to run a TLS handshake (the step between the ClientHello read
// by InboundConnection and ApiConnection): none while relayd has no certificate for the API domain;
// none past a source address's share of the handshake slots (1/8 of them, held while waiting too);
// then a slot of context.apiHandshakes (handshake_slots.h), now or after a wait of up to 1 s, or
// the connection is shed. Loop thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "common/tcp_stream.h"

namespace ot::relayd {

class Relay;
struct RelayContext;

// Takes over `stream` (not reading; `hello` is its ClientHello, not yet given to TLS), accepted at
// `startedAtMs`: starts an ApiConnection now or once a slot frees, or closes the stream unserved.
// `dialId`: direct mode's dial the connection came from (0: accepted), passed to the connection.
void admitApiConnection(RelayContext& context, Relay& relay, TcpStream* stream,
                        std::vector<uint8_t> hello, uint64_t startedAtMs, uint64_t dialId = 0);

}  // namespace ot::relayd
