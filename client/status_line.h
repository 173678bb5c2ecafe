// What otunnel tells people on stderr when its bridges change state. Pure: the event loop calls it
// with each PoolStatus and prints the line when the status's key differs from the last printed.
#pragma once

#include <optional>
#include <string>

#include "client/bridge_pool.h"

namespace ot::client {

// "otunnel: connected (2/2 links)", "otunnel: reconnecting in 1.3 s: <lastError>",
// "otunnel: <lastError>" when fatal; std::nullopt while the first attempts are still running.
[[nodiscard]] std::optional<std::string> statusLine(const PoolStatus& status);

// What makes a status worth a new line: links, attached, fatal and the error, not the retry delay
// (which changes on every attempt and would repeat the same failure line after line).
[[nodiscard]] std::string statusKey(const PoolStatus& status);

// Milliseconds as seconds with one decimal, rounded: 1250 -> "1.3".
[[nodiscard]] std::string formatSeconds(uint64_t ms);

}  // namespace ot::client
