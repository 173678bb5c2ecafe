// otunnel's bridge frames (client/relay_frame.h): masked with a zero key, so the payload goes out
// as it is and a relay decoding them as RFC 6455 requires reads the same bytes.
#include "client/relay_frame.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <span>
#include <vector>

#include "common/websocket_frame.h"

namespace {

using Bytes = std::vector<uint8_t>;

// Decodes `wire` the way relayd does (the server role requires the mask bit) into one frame.
struct Decoded {
  ot::ws::FrameHeader header;
  Bytes payload;
  size_t consumed = 0;
};

Decoded decodeOne(Bytes wire) {
  ot::ws::FrameDecoder decoder(ot::ws::Role::kServer);
  Decoded out;
  std::span<uint8_t> rest(wire);
  for (;;) {
    const auto step = decoder.decode(rest);
    REQUIRE(step.event != ot::ws::DecodeEvent::kError);
    rest = rest.subspan(step.consumed);
    out.consumed += step.consumed;
    if (step.event == ot::ws::DecodeEvent::kHeader) out.header = decoder.header();
    if (step.event == ot::ws::DecodeEvent::kPayload) {
      out.payload.insert(out.payload.end(), step.payload.begin(), step.payload.end());
    }
    if (step.event == ot::ws::DecodeEvent::kFrameEnd) return out;
    REQUIRE(step.event != ot::ws::DecodeEvent::kNeedMore);
  }
}

}  // namespace

TEST_CASE("relay frame: masked with a zero key, the payload as it is, in any size class") {
  for (size_t n : {size_t{0}, size_t{5}, size_t{200}, size_t{32768}, size_t{70000}}) {
    CAPTURE(n);
    const Bytes head = {1, 0, 0, 0, 7};
    Bytes payload(n);
    for (size_t i = 0; i < n; ++i) payload[i] = static_cast<uint8_t>(i * 13 + 1);
    Bytes out = {0xEE};  // appended after what is there
    ot::client::appendBridgeFrame(out, ot::ws::Opcode::kBinary, head, payload);
    REQUIRE(out.front() == 0xEE);
    const Bytes wire(out.begin() + 1, out.end());
    Bytes whole = head;
    whole.insert(whole.end(), payload.begin(), payload.end());
    // The bytes after the header are the payload unmasked: no pass over it was needed.
    REQUIRE(wire.size() >= whole.size());
    CHECK(Bytes(wire.end() - static_cast<long>(whole.size()), wire.end()) == whole);
    const Decoded decoded = decodeOne(wire);
    CHECK(decoded.consumed == wire.size());
    CHECK(decoded.header.fin);
    CHECK(decoded.header.opcode == ot::ws::Opcode::kBinary);
    CHECK(decoded.header.masked);
    CHECK(decoded.header.maskKey == ot::ws::MaskKey{});
    CHECK(decoded.payload == whole);
  }
}

TEST_CASE("relay frame: control frames too") {
  const Bytes body = {0x03, 0xE8, 'b', 'y', 'e'};
  Bytes out;
  ot::client::appendBridgeFrame(out, ot::ws::Opcode::kClose, {}, body);
  const Decoded decoded = decodeOne(out);
  CHECK(decoded.header.opcode == ot::ws::Opcode::kClose);
  CHECK(decoded.header.masked);
  CHECK(decoded.payload == body);
}
