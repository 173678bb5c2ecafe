// The WebSocket frames otunnel sends on its bridge (docs/protocol.md section 3): final frames
// with the mask bit set and a zero mask key. RFC 6455 5.3 wants an unpredictable key; its
// purpose (10.3) is to keep a browser's script from choosing the bytes an intermediary sees,
// and otunnel is no browser and its frames travel inside TLS. With a zero key masking is the
// identity: no pass over the payload here, and none in relayd (maskCopy skips a zero key). A
// relay that unmasks with the key as sent reads the same bytes, so old and new relays and
// clients work in any pairing. Pure; no allocation beyond `out`'s growth.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/websocket_frame.h"

namespace ot::client {

// The key every frame of ours carries.
inline constexpr ws::MaskKey kBridgeMaskKey{};

// Appends one final frame of `opcode` whose payload is `head` followed by `payload`.
void appendBridgeFrame(std::vector<uint8_t>& out, ws::Opcode opcode, std::span<const uint8_t> head,
                       std::span<const uint8_t> payload);
// The same frame without its last `rest` payload bytes, which the caller sends right after.
void appendBridgeFrameStart(std::vector<uint8_t>& out, ws::Opcode opcode,
                            std::span<const uint8_t> head, size_t rest);

}  // namespace ot::client
