// What a visitor of `otunnel http` gets when the local service cannot be reached (nothing listens
// on the port, its name does not resolve, the connect times out): instead of a connection reset
// in the middle of the TLS handshake, which browsers and curl report as an obscure TLS error, the
// visitor's TLS completes and the request is answered 502 Bad Gateway with a plain-text line that
// says which local address failed and why. Passthrough (`otunnel tls`) and HTTP/2 visitors still
// get a reset: otunnel cannot speak their protocol for the local service. Pure.
#pragma once

#include <string>
#include <string_view>

#include "client/bridge_pool.h"

namespace ot::client {

// How long a stream whose local service failed waits for the visitor's request and end before it
// resets the connection.
inline constexpr uint64_t kUnreachableAnswerMs = 10'000;

// The whole HTTP/1.1 response (head and body; Connection: close).
[[nodiscard]] std::string badGatewayResponse(const LocalTarget& target, std::string_view error);

}  // namespace ot::client
