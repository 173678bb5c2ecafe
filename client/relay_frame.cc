#include "client/relay_frame.h"

namespace ot::client {

void appendBridgeFrame(std::vector<uint8_t>& out, ws::Opcode opcode, std::span<const uint8_t> head,
                       std::span<const uint8_t> payload) {
  const size_t length = head.size() + payload.size();
  const ws::EncodedHeader header = ws::encodeFrameHeader(opcode, true, length, kBridgeMaskKey);
  out.reserve(out.size() + header.size + length);
  out.insert(out.end(), header.bytes.data(), header.bytes.data() + header.size);
  out.insert(out.end(), head.begin(), head.end());
  out.insert(out.end(), payload.begin(), payload.end());
}

}  // namespace ot::client
