#include "client/relay_frame.h"

namespace ot::client {

void appendBridgeFrameStart(std::vector<uint8_t>& out, ws::Opcode opcode,
                            std::span<const uint8_t> head, size_t rest) {
  const ws::EncodedHeader header =
      ws::encodeFrameHeader(opcode, true, head.size() + rest, kBridgeMaskKey);
  out.insert(out.end(), header.bytes.data(), header.bytes.data() + header.size);
  out.insert(out.end(), head.begin(), head.end());
}

void appendBridgeFrame(std::vector<uint8_t>& out, ws::Opcode opcode, std::span<const uint8_t> head,
                       std::span<const uint8_t> payload) {
  out.reserve(out.size() + ws::kMaxFrameHeaderSize + head.size() + payload.size());
  appendBridgeFrameStart(out, opcode, head, payload.size());
  out.insert(out.end(), payload.begin(), payload.end());
}

}  // namespace ot::client
