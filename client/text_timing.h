// When otunnel's control message to the relay leaves: now, or with our answer to the relay's next
// ping, in one TLS record, so the relay reads both with one wakeup (an idle bridge's status
// refresh: docs/capacity.md, "Idle").
#pragma once

#include <cstdint>

namespace ot::client {

enum class TextTiming : uint8_t { kNow, kWithNextPong };

}  // namespace ot::client
