// Frames, masking, close bodies, UTF-8 and message assembly (RFC 6455). Handshake tests live in
// websocket_handshake_test.cc.
#include "common/websocket.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace {

using ot::ws::DecodeEvent;
using ot::ws::Delivery;
using ot::ws::Error;
using ot::ws::FrameDecoder;
using ot::ws::MaskKey;
using ot::ws::MessageReader;
using ot::ws::Opcode;
using ot::ws::ReadEvent;
using ot::ws::Role;
using Bytes = std::vector<uint8_t>;

Bytes frameBytesOf(std::string_view s) {
  return Bytes(s.begin(), s.end());
}
std::string textOf(std::span<const uint8_t> b) {
  return std::string(b.begin(), b.end());
}

Bytes concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Bytes pattern(size_t n) {
  Bytes out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i * 7 + 3);
  return out;
}

// RFC 6455 section 5.7.
const Bytes kHelloUnmasked = {0x81, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f};
const Bytes kHelloMasked = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
const Bytes kHelFragment = {0x01, 0x03, 0x48, 0x65, 0x6c};
const Bytes kLoFragment = {0x80, 0x02, 0x6c, 0x6f};
const Bytes kPingHello = {0x89, 0x05, 0x48, 0x65, 0x6c, 0x6c, 0x6f};
const Bytes kPongHelloMasked = {0x8a, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
const MaskKey kRfcMask = {0x37, 0xfa, 0x21, 0x3d};

Bytes binary256Header() {
  return {0x82, 0x7E, 0x01, 0x00};
}
Bytes binary64KiBHeader() {
  return {0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0};
}

// --- Drivers that feed input in pieces of `piece` bytes (0 = all at once) ----------------------

struct DecodedFrame {
  ot::ws::FrameHeader header;
  Bytes payload;
  bool ended = false;
};

struct FrameOutcome {
  std::vector<DecodedFrame> frames;
  Error error = Error::kNone;
  size_t consumed = 0;
};

FrameOutcome decodeFrames(Role role, Bytes input, size_t piece) {
  FrameDecoder decoder(role);
  FrameOutcome out;
  if (piece == 0) piece = std::max<size_t>(input.size(), 1);
  for (size_t start = 0; start < input.size() && out.error == Error::kNone; start += piece) {
    std::span<uint8_t> rest = std::span<uint8_t>(input).subspan(start);
    rest = rest.first(std::min(piece, rest.size()));
    while (true) {
      const auto step = decoder.decode(rest);
      REQUIRE(step.consumed <= rest.size());
      out.consumed += step.consumed;
      rest = rest.subspan(step.consumed);
      if (step.event == DecodeEvent::kNeedMore) {
        CHECK(rest.empty());
        break;
      }
      if (step.event == DecodeEvent::kError) {
        out.error = step.error;
        break;
      }
      if (step.event == DecodeEvent::kHeader) out.frames.push_back({decoder.header(), {}, false});
      if (step.event == DecodeEvent::kPayload) {
        CHECK(!step.payload.empty());
        out.frames.back().payload.insert(out.frames.back().payload.end(), step.payload.begin(),
                                         step.payload.end());
      }
      if (step.event == DecodeEvent::kFrameEnd) out.frames.back().ended = true;
    }
  }
  return out;
}

struct Event {
  ReadEvent kind;
  Opcode opcode;
  std::string data;
  bool begin = false;
  bool end = false;
  uint16_t closeCode = 0;
  std::string reason;
  bool operator==(const Event&) const = default;
};

struct ReadOutcome {
  std::vector<Event> events;
  Error error = Error::kNone;
  size_t consumed = 0;
  // kStream chunks of one message glued into one event placed where the message ended, so
  // outcomes compare across piece sizes (control frames may sit between the chunks).
  std::vector<Event> merged() const {
    std::vector<Event> out;
    std::optional<Event> open;
    for (const Event& e : events) {
      if (e.kind != ReadEvent::kData) {
        out.push_back(e);
        continue;
      }
      if (e.begin) {
        CHECK(!open.has_value());
        open = e;
      } else {
        REQUIRE(open.has_value());
        open->data += e.data;
        open->end = e.end;
      }
      if (open->end) {
        out.push_back(*open);
        open.reset();
      }
    }
    if (open) out.push_back(*open);  // a message still in progress at the end of input
    return out;
  }
};

ReadOutcome readMessages(MessageReader& reader, Bytes input, size_t piece) {
  ReadOutcome out;
  if (piece == 0) piece = std::max<size_t>(input.size(), 1);
  for (size_t start = 0; start < input.size() && out.error == Error::kNone; start += piece) {
    std::span<uint8_t> rest = std::span<uint8_t>(input).subspan(start);
    rest = rest.first(std::min(piece, rest.size()));
    while (true) {
      auto step = reader.next(rest);
      REQUIRE(step.consumed <= rest.size());
      out.consumed += step.consumed;
      rest = rest.subspan(step.consumed);
      if (step.event == ReadEvent::kNeedMore) {
        CHECK(rest.empty());
        break;
      }
      if (step.event == ReadEvent::kError) {
        out.error = step.error;
        break;
      }
      Event e{step.event, step.opcode, {}, step.messageBegin, step.messageEnd, 0, {}};
      e.data = step.event == ReadEvent::kData      ? textOf(step.chunk)
               : step.event == ReadEvent::kMessage ? textOf(step.message())
                                                   : textOf(step.payload);
      if (step.event == ReadEvent::kControl && step.opcode == Opcode::kClose) {
        e.closeCode = step.closeCode;
        e.reason = std::string(step.closeReason());
      }
      out.events.push_back(e);
    }
  }
  return out;
}

ReadOutcome readMessages(Role role, const Bytes& input, size_t piece,
                         Delivery delivery = Delivery::kWhole, uint64_t limit = 1 << 20) {
  MessageReader reader(role, limit, delivery);
  return readMessages(reader, input, piece);
}

Event message(Opcode op, std::string_view data) {
  return {ReadEvent::kMessage, op, std::string(data), false, false, 0, {}};
}
Event control(Opcode op, std::string_view data) {
  return {ReadEvent::kControl, op, std::string(data), false, false, 0, {}};
}

Error firstError(Role role, const Bytes& input) {
  return readMessages(role, input, 0).error;
}

}  // namespace

// --- Encoder -----------------------------------------------------------------------------------

TEST_CASE("websocket: RFC 6455 5.7 examples encode byte-exact") {
  CHECK(ot::ws::buildText("Hello") == kHelloUnmasked);
  CHECK(ot::ws::buildText("Hello", kRfcMask) == kHelloMasked);
  CHECK(ot::ws::buildFrame(Opcode::kText, frameBytesOf("Hel"), std::nullopt, false) ==
        kHelFragment);
  CHECK(ot::ws::buildFrame(Opcode::kContinuation, frameBytesOf("lo")) == kLoFragment);
  CHECK(ot::ws::buildPing(frameBytesOf("Hello")) == kPingHello);
  CHECK(ot::ws::buildPong(frameBytesOf("Hello"), kRfcMask) == kPongHelloMasked);

  const auto h256 = ot::ws::encodeFrameHeader(Opcode::kBinary, true, 256);
  CHECK(Bytes(h256.view().begin(), h256.view().end()) == binary256Header());
  const auto h64k = ot::ws::encodeFrameHeader(Opcode::kBinary, true, 65536);
  CHECK(Bytes(h64k.view().begin(), h64k.view().end()) == binary64KiBHeader());
}

TEST_CASE("websocket: header encoding picks the minimal length form at each boundary") {
  struct Case {
    uint64_t length;
    size_t size;
  };
  for (const Case c : {Case{0, 2}, Case{125, 2}, Case{126, 4}, Case{65535, 4}, Case{65536, 10},
                       Case{uint64_t{1} << 40, 10}}) {
    CAPTURE(c.length);
    const auto plain = ot::ws::encodeFrameHeader(Opcode::kBinary, false, c.length);
    CHECK(plain.size == c.size);
    CHECK(plain.bytes[0] == 0x02);
    const auto masked = ot::ws::encodeFrameHeader(Opcode::kBinary, true, c.length, kRfcMask);
    CHECK(masked.size == c.size + 4);
    CHECK(masked.bytes[0] == 0x82);
    CHECK((masked.bytes[1] & 0x80) == 0x80);
    CHECK(std::equal(kRfcMask.begin(), kRfcMask.end(), masked.bytes.begin() + c.size));
  }
  const auto big = ot::ws::encodeFrameHeader(Opcode::kBinary, true, 0x0102030405060708);
  CHECK(Bytes(big.view().begin(), big.view().end()) == Bytes{0x82, 0x7F, 1, 2, 3, 4, 5, 6, 7, 8});
}

TEST_CASE("websocket: masking in pieces at any offset equals masking whole") {
  const MaskKey key = {0xA1, 0x02, 0xF3, 0x44};
  const Bytes original = pattern(103);
  Bytes whole = original;
  ot::ws::maskInPlace(whole, key);
  for (size_t i = 0; i < whole.size(); ++i) {
    REQUIRE(whole[i] == (original[i] ^ key[i % 4]));
  }
  for (size_t piece = 1; piece <= 17; ++piece) {
    CAPTURE(piece);
    Bytes pieces = original;
    for (size_t off = 0; off < pieces.size(); off += piece) {
      const size_t n = std::min(piece, pieces.size() - off);
      ot::ws::maskInPlace(std::span<uint8_t>(pieces).subspan(off, n), key, off);
    }
    CHECK(pieces == whole);
    // Masking is its own inverse, also when undone in different pieces.
    for (size_t off = 0; off < pieces.size(); off += piece + 1) {
      const size_t n = std::min(piece + 1, pieces.size() - off);
      ot::ws::maskInPlace(std::span<uint8_t>(pieces).subspan(off, n), key, off);
    }
    CHECK(pieces == original);
  }
  // A 64-bit offset far past 2^32 still selects key[offset % 4].
  Bytes one = {0x00};
  ot::ws::maskInPlace(one, key, (uint64_t{1} << 40) + 3);
  CHECK(one[0] == key[3]);
}

TEST_CASE("websocket: maskCopy copies and masks in one pass, at any offset and alignment") {
  const MaskKey key = {0x5C, 0xE1, 0x07, 0x9A};
  const Bytes original = pattern(300);
  for (size_t start = 0; start < 9; ++start) {  // source alignment
    for (size_t length : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{31}, size_t{32},
                          size_t{33}, size_t{64}, size_t{100}, size_t{291}}) {
      for (uint64_t offset :
           {uint64_t{0}, uint64_t{1}, uint64_t{2}, uint64_t{3}, (uint64_t{1} << 33) + 1}) {
        CAPTURE(start);
        CAPTURE(length);
        CAPTURE(offset);
        const std::span<const uint8_t> in =
            std::span<const uint8_t>(original).subspan(start, length);
        Bytes out(length + 5, 0xEE);  // a guard past the end
        ot::ws::maskCopy(std::span<uint8_t>(out).subspan(1), in, key, offset);
        CHECK(out[0] == 0xEE);
        for (size_t i = 0; i < length; ++i) {
          REQUIRE(out[1 + i] == (in[i] ^ key[(offset + i) % 4]));
        }
        for (size_t i = length + 1; i < out.size(); ++i) REQUIRE(out[i] == 0xEE);
      }
    }
  }
}

// --- Decoder -----------------------------------------------------------------------------------

TEST_CASE("websocket: RFC 6455 5.7 examples decode") {
  auto single = decodeFrames(Role::kClient, kHelloUnmasked, 0);
  REQUIRE(single.frames.size() == 1);
  CHECK(single.frames[0].header.fin);
  CHECK(single.frames[0].header.opcode == Opcode::kText);
  CHECK_FALSE(single.frames[0].header.masked);
  CHECK(textOf(single.frames[0].payload) == "Hello");
  CHECK(single.consumed == kHelloUnmasked.size());

  auto masked = decodeFrames(Role::kServer, kHelloMasked, 0);
  REQUIRE(masked.frames.size() == 1);
  CHECK(masked.frames[0].header.masked);
  CHECK(masked.frames[0].header.maskKey == kRfcMask);
  CHECK(textOf(masked.frames[0].payload) == "Hello");

  auto fragments = decodeFrames(Role::kClient, concat({kHelFragment, kLoFragment}), 0);
  REQUIRE(fragments.frames.size() == 2);
  CHECK_FALSE(fragments.frames[0].header.fin);
  CHECK(fragments.frames[1].header.opcode == Opcode::kContinuation);
  CHECK(textOf(fragments.frames[0].payload) + textOf(fragments.frames[1].payload) == "Hello");

  CHECK(readMessages(Role::kClient, kPingHello, 0).events ==
        std::vector<Event>{control(Opcode::kPing, "Hello")});
  CHECK(readMessages(Role::kServer, kPongHelloMasked, 0).events ==
        std::vector<Event>{control(Opcode::kPong, "Hello")});

  const Bytes p256 = pattern(256);
  auto b256 = decodeFrames(Role::kClient, concat({binary256Header(), p256}), 0);
  REQUIRE(b256.frames.size() == 1);
  CHECK(b256.frames[0].header.payloadLength == 256);
  CHECK(b256.frames[0].payload == p256);

  const Bytes p64k = pattern(65536);
  auto b64k = decodeFrames(Role::kClient, concat({binary64KiBHeader(), p64k}), 0);
  REQUIRE(b64k.frames.size() == 1);
  CHECK(b64k.frames[0].header.payloadLength == 65536);
  CHECK(b64k.frames[0].payload == p64k);
}

namespace {

// A client->server stream with every feature: masked, fragments, interleaved control frames,
// 16- and 64-bit lengths, an empty message, a close.
Bytes richServerStream() {
  const MaskKey k1 = {1, 2, 3, 4};
  const MaskKey k2 = {0xFF, 0x00, 0x80, 0x7F};
  return concat({
      ot::ws::buildText("Hello", kRfcMask),
      ot::ws::buildFrame(Opcode::kBinary, pattern(300), k1, false),
      ot::ws::buildPing(frameBytesOf("are you there"), k2),
      ot::ws::buildFrame(Opcode::kContinuation, {}, k1, false),
      ot::ws::buildPong({}, k1),
      ot::ws::buildFrame(Opcode::kContinuation, pattern(70000), k2, true),
      ot::ws::buildFrame(Opcode::kBinary, {}, k2),
      ot::ws::buildFrame(Opcode::kText, frameBytesOf("\xE2\x82"), k1, false),
      ot::ws::buildFrame(Opcode::kContinuation, frameBytesOf("\xAC ok"), k2, true),
      ot::ws::buildClose(ot::ws::kCloseGoingAway, "bye", k1),
  });
}

}  // namespace

TEST_CASE("websocket: byte-by-byte and chunked decoding equal whole decoding") {
  const Bytes stream = richServerStream();
  const FrameOutcome whole = decodeFrames(Role::kServer, stream, 0);
  CHECK(whole.error == Error::kNone);
  CHECK(whole.consumed == stream.size());
  CHECK(whole.frames.size() == 10);
  for (size_t piece : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{13}, size_t{4096}}) {
    CAPTURE(piece);
    const FrameOutcome split = decodeFrames(Role::kServer, stream, piece);
    CHECK(split.consumed == whole.consumed);
    REQUIRE(split.frames.size() == whole.frames.size());
    for (size_t i = 0; i < whole.frames.size(); ++i) {
      CHECK(split.frames[i].header.opcode == whole.frames[i].header.opcode);
      CHECK(split.frames[i].header.fin == whole.frames[i].header.fin);
      CHECK(split.frames[i].header.payloadLength == whole.frames[i].header.payloadLength);
      CHECK(split.frames[i].payload == whole.frames[i].payload);
      CHECK(split.frames[i].ended);
    }
  }

  const std::vector<Event> expected = {
      message(Opcode::kText, "Hello"),
      control(Opcode::kPing, "are you there"),
      control(Opcode::kPong, ""),
      message(Opcode::kBinary, textOf(concat({pattern(300), pattern(70000)}))),
      message(Opcode::kBinary, ""),
      message(Opcode::kText, "\xE2\x82\xAC ok"),
      {ReadEvent::kControl, Opcode::kClose,
       "\x03\xE9"
       "bye",
       false, false, 1001, "bye"},
  };
  for (Delivery delivery : {Delivery::kWhole, Delivery::kWholeView, Delivery::kStream}) {
    for (size_t piece : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}}) {
      CAPTURE(piece);
      const ReadOutcome got = readMessages(Role::kServer, stream, piece, delivery);
      CHECK(got.error == Error::kNone);
      CHECK(got.consumed == stream.size());
      std::vector<Event> events = got.merged();
      if (delivery == Delivery::kStream) {
        // Normalise stream events to whole messages for the comparison.
        for (Event& e : events) {
          if (e.kind != ReadEvent::kData) continue;
          CHECK(e.begin);
          CHECK(e.end);
          e = message(e.opcode, e.data);
        }
      }
      CHECK(events == expected);
    }
  }
}

TEST_CASE("websocket: every strict prefix of a valid stream only needs more") {
  for (const Bytes& frame :
       {kHelloMasked, ot::ws::buildFrame(Opcode::kBinary, pattern(300), kRfcMask),
        ot::ws::buildFrame(Opcode::kBinary, pattern(70000), kRfcMask),
        ot::ws::buildClose(1000, "done", kRfcMask),
        concat({ot::ws::buildFrame(Opcode::kText, frameBytesOf("ab"), kRfcMask, false),
                ot::ws::buildFrame(Opcode::kContinuation, frameBytesOf("c"), kRfcMask)})}) {
    // Every prefix of short frames; for the big one, every header prefix and a spread of others.
    for (size_t len = 0; len < frame.size(); len += (len < 40 ? 1 : 997)) {
      CAPTURE(len);
      const Bytes prefix(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(len));
      const ReadOutcome got = readMessages(Role::kServer, prefix, 0);
      CHECK(got.error == Error::kNone);
      CHECK(got.events.empty());
      CHECK(got.consumed == len);
    }
    CHECK(readMessages(Role::kServer, frame, 0).events.size() == 1);
  }
}

TEST_CASE("websocket: decodeInto unmasks into the caller's buffer and leaves input alone") {
  const Bytes input = ot::ws::buildText("Hello, world", kRfcMask);
  const Bytes copy = input;
  FrameDecoder decoder(Role::kServer);
  std::array<uint8_t, 5> out{};
  std::span<const uint8_t> rest = input;
  std::string text;
  auto step = decoder.decodeInto(rest, out);
  REQUIRE(step.event == DecodeEvent::kHeader);
  CHECK(step.consumed == 6);
  rest = rest.subspan(step.consumed);
  std::vector<size_t> sizes;
  while ((step = decoder.decodeInto(rest, out)).event == DecodeEvent::kPayload) {
    CHECK(step.payload.data() == out.data());
    sizes.push_back(step.payload.size());
    text += textOf(step.payload);
    rest = rest.subspan(step.consumed);
  }
  CHECK(step.event == DecodeEvent::kFrameEnd);
  CHECK(sizes == std::vector<size_t>{5, 5, 2});
  CHECK(text == "Hello, world");
  CHECK(input == copy);
  CHECK(decoder.decodeInto({}, out).event == DecodeEvent::kNeedMore);
}

TEST_CASE("websocket: header violations are protocol errors at the deciding byte") {
  struct Case {
    const char* name;
    Role role;
    Bytes input;
    Error error;
    size_t consumed;
  };
  const std::vector<Case> cases = {
      {"rsv1", Role::kClient, {0xC1, 0x00}, Error::kReservedBits, 1},
      {"rsv2", Role::kClient, {0xA1, 0x00}, Error::kReservedBits, 1},
      {"rsv3", Role::kClient, {0x91, 0x00}, Error::kReservedBits, 1},
      {"opcode 3", Role::kClient, {0x83, 0x00}, Error::kUnknownOpcode, 1},
      {"opcode 7", Role::kClient, {0x87, 0x00}, Error::kUnknownOpcode, 1},
      {"opcode B", Role::kClient, {0x8B, 0x00}, Error::kUnknownOpcode, 1},
      {"opcode F", Role::kClient, {0x8F, 0x00}, Error::kUnknownOpcode, 1},
      {"ping without fin", Role::kClient, {0x09, 0x00}, Error::kFragmentedControl, 1},
      {"close without fin", Role::kClient, {0x08, 0x00}, Error::kFragmentedControl, 1},
      {"pong without fin", Role::kClient, {0x0A, 0x00}, Error::kFragmentedControl, 1},
      {"ping 126", Role::kClient, {0x89, 0x7E, 0x00, 0x7E}, Error::kControlTooLong, 2},
      {"close 127", Role::kClient, {0x88, 0x7F}, Error::kControlTooLong, 2},
      {"length high bit",
       Role::kClient,
       {0x82, 0x7F, 0x80, 0, 0, 0, 0, 0, 0, 0},
       Error::kLengthHighBit,
       3},
      {"16-bit length 125", Role::kClient, {0x82, 0x7E, 0x00, 0x7D}, Error::kNonMinimalLength, 4},
      {"16-bit length 0", Role::kClient, {0x82, 0x7E, 0x00, 0x00}, Error::kNonMinimalLength, 4},
      {"64-bit length 65535",
       Role::kClient,
       {0x82, 0x7F, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF},
       Error::kNonMinimalLength,
       10},
      {"64-bit length 5",
       Role::kClient,
       {0x82, 0x7F, 0, 0, 0, 0, 0, 0, 0, 5},
       Error::kNonMinimalLength,
       10},
      {"unmasked to server", Role::kServer, kHelloUnmasked, Error::kMaskRequired, 2},
      {"masked to client", Role::kClient, kHelloMasked, Error::kMaskNotAllowed, 2},
      {"error after a good frame", Role::kClient, concat({kHelloUnmasked, {0xF1}}),
       Error::kReservedBits, kHelloUnmasked.size() + 1},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    for (size_t piece : {size_t{0}, size_t{1}}) {
      const FrameOutcome got = decodeFrames(c.role, c.input, piece);
      CHECK(got.error == c.error);
      CHECK(got.consumed == c.consumed);
    }
    CHECK(ot::ws::closeCodeFor(c.error) == ot::ws::kCloseProtocolError);
  }
}

TEST_CASE("websocket: a decoder in error stays in error") {
  FrameDecoder decoder(Role::kClient);
  Bytes bad = {0xC1, 0x00, 0x81, 0x00};
  auto step = decoder.decode(bad);
  CHECK(step.event == DecodeEvent::kError);
  CHECK(step.consumed == 1);
  Bytes good = kHelloUnmasked;
  step = decoder.decode(good);
  CHECK(step.event == DecodeEvent::kError);
  CHECK(step.error == Error::kReservedBits);
  CHECK(step.consumed == 0);

  MessageReader reader(Role::kClient, 100);
  CHECK(reader.next(bad).event == ReadEvent::kError);
  auto again = reader.next(good);
  CHECK(again.event == ReadEvent::kError);
  CHECK(again.consumed == 0);
}

TEST_CASE("websocket: largest lengths are accepted by the frame decoder") {
  FrameDecoder decoder(Role::kClient);
  Bytes header = {0x82, 0x7F, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  auto step = decoder.decode(header);
  CHECK(step.event == DecodeEvent::kHeader);
  CHECK(decoder.header().payloadLength == 0x7FFFFFFFFFFFFFFF);
  CHECK(decoder.payloadRemaining() == 0x7FFFFFFFFFFFFFFF);
  // Between frames, a half-read header reports no payload left over from the previous frame.
  Bytes next = {0x82, 0x7E};
  FrameDecoder reused(Role::kClient);
  Bytes first = ot::ws::buildFrame(Opcode::kBinary, pattern(300));
  CHECK(decodeFrames(Role::kClient, first, 0).frames.size() == 1);
  std::span<uint8_t> rest(first);
  while (!rest.empty()) rest = rest.subspan(reused.decode(rest).consumed);
  CHECK(reused.decode(rest).event == DecodeEvent::kFrameEnd);
  CHECK(reused.decode(next).event == DecodeEvent::kNeedMore);
  CHECK(reused.payloadRemaining() <= 126);  // not 126 - 300 wrapped around
  Bytes control = {0x89, 0x7D};
  FrameDecoder second(Role::kClient);
  CHECK(second.decode(control).event == DecodeEvent::kHeader);
  CHECK(second.header().payloadLength == 125);
}

// --- Messages ----------------------------------------------------------------------------------

TEST_CASE("websocket: fragmentation rules") {
  const Bytes continuation = ot::ws::buildFrame(Opcode::kContinuation, frameBytesOf("x"));
  auto lone = readMessages(Role::kClient, continuation, 0);
  CHECK(lone.error == Error::kUnexpectedContinuation);
  CHECK(lone.consumed == 2);  // found on the header, before the payload
  CHECK(ot::ws::closeCodeFor(lone.error) == 1002);

  const Bytes newDuringFragmented =
      concat({kHelFragment, ot::ws::buildFrame(Opcode::kBinary, frameBytesOf("x"))});
  auto restart = readMessages(Role::kClient, newDuringFragmented, 0);
  CHECK(restart.error == Error::kExpectedContinuation);
  CHECK(restart.consumed == kHelFragment.size() + 2);

  const Bytes textDuringFragmented = concat({kHelFragment, kHelFragment});
  CHECK(firstError(Role::kClient, textDuringFragmented) == Error::kExpectedContinuation);

  // A continuation after a completed message is unexpected again.
  CHECK(firstError(Role::kClient, concat({kHelFragment, kLoFragment, kLoFragment})) ==
        Error::kUnexpectedContinuation);
}

TEST_CASE("websocket: one message may take at most kMaxMessageFragments frames") {
  // A first frame, empty continuations and a final one: `frames` frames in all.
  const auto fragmented = [](uint32_t frames) {
    Bytes out = ot::ws::buildFrame(Opcode::kBinary, frameBytesOf("a"), std::nullopt, false);
    for (uint32_t i = 2; i < frames; ++i) {
      const Bytes empty = ot::ws::buildFrame(Opcode::kContinuation, {}, std::nullopt, false);
      out.insert(out.end(), empty.begin(), empty.end());
      if (i % 100 == 0) {  // control frames in between are not fragments of the message
        out.insert(out.end(), kPingHello.begin(), kPingHello.end());
      }
    }
    const Bytes last = ot::ws::buildFrame(Opcode::kContinuation, frameBytesOf("b"));
    out.insert(out.end(), last.begin(), last.end());
    return out;
  };
  const uint32_t limit = ot::ws::kMaxMessageFragments;
  for (const Delivery delivery : {Delivery::kWhole, Delivery::kWholeView, Delivery::kStream}) {
    CAPTURE(static_cast<int>(delivery));
    // Exactly at the limit, twice: the count starts again with each message.
    const Bytes atLimit = fragmented(limit);
    auto fine = readMessages(Role::kClient, concat({atLimit, atLimit}), 0, delivery);
    CHECK(fine.error == Error::kNone);
    CHECK(fine.consumed == 2 * atLimit.size());

    const Bytes over = fragmented(limit + 1);
    auto refused = readMessages(Role::kClient, over, 0, delivery);
    CHECK(refused.error == Error::kTooManyFragments);
    CHECK(refused.consumed < over.size());  // found on a header, before the message ended
    CHECK(ot::ws::closeCodeFor(refused.error) == 1009);
  }
}

TEST_CASE("websocket: control frames interleaved within a fragmented message") {
  const Bytes stream =
      concat({kHelFragment, kPingHello, ot::ws::buildPong(frameBytesOf("p")), kLoFragment});
  for (size_t piece : {size_t{0}, size_t{1}}) {
    CAPTURE(piece);
    auto whole = readMessages(Role::kClient, stream, piece, Delivery::kWhole);
    CHECK(whole.error == Error::kNone);
    CHECK(whole.events == std::vector<Event>{control(Opcode::kPing, "Hello"),
                                             control(Opcode::kPong, "p"),
                                             message(Opcode::kText, "Hello")});
  }
  auto streamed = readMessages(Role::kClient, stream, 0, Delivery::kStream);
  CHECK(streamed.events == std::vector<Event>{
                               {ReadEvent::kData, Opcode::kText, "Hel", true, false, 0, {}},
                               control(Opcode::kPing, "Hello"),
                               control(Opcode::kPong, "p"),
                               {ReadEvent::kData, Opcode::kText, "lo", false, false, 0, {}},
                               {ReadEvent::kData, Opcode::kText, "", false, true, 0, {}},
                           });
}

TEST_CASE("websocket: kWholeView hands a frame lying whole in the input over in place") {
  Bytes input = concat({ot::ws::buildFrame(Opcode::kBinary, pattern(70000), kRfcMask),
                        ot::ws::buildFrame(Opcode::kBinary, pattern(20), kRfcMask)});
  MessageReader reader(Role::kServer, 100000, Delivery::kWholeView);
  std::span<uint8_t> rest(input);
  auto step = reader.next(rest);
  REQUIRE(step.event == ReadEvent::kMessage);
  CHECK(step.payload.empty());
  CHECK(step.chunk.data() == input.data() + 14);  // unmasked in place, not copied
  CHECK(Bytes(step.message().begin(), step.message().end()) == pattern(70000));
  rest = rest.subspan(step.consumed);
  step = reader.next(rest);
  REQUIRE(step.event == ReadEvent::kMessage);
  CHECK(step.chunk.data() == input.data() + 14 + 70000 + 6);
  CHECK(Bytes(step.message().begin(), step.message().end()) == pattern(20));

  // Split across two inputs: collected (copied and unmasked together) and handed over by value;
  // the first input is left as it came (nothing is unmasked in place on this path).
  Bytes split = ot::ws::buildFrame(Opcode::kBinary, pattern(1000), kRfcMask);
  const Bytes splitCopy = split;
  MessageReader collector(Role::kServer, 100000, Delivery::kWholeView);
  std::span<uint8_t> first = std::span<uint8_t>(split).first(500);
  auto part = collector.next(first);
  CHECK(part.event == ReadEvent::kNeedMore);
  CHECK(split == splitCopy);
  std::span<uint8_t> second = std::span<uint8_t>(split).subspan(500);
  part = collector.next(second);
  REQUIRE(part.event == ReadEvent::kMessage);
  CHECK(part.chunk.empty());
  CHECK(part.payload == pattern(1000));
  CHECK(Bytes(part.message().begin(), part.message().end()) == pattern(1000));

  // A fragmented message is collected too, even when every fragment lies in the input.
  const Bytes fragmented =
      concat({ot::ws::buildFrame(Opcode::kBinary, pattern(10), kRfcMask, false),
              ot::ws::buildFrame(Opcode::kContinuation, pattern(5), kRfcMask, true)});
  auto whole = readMessages(Role::kServer, fragmented, 0, Delivery::kWholeView);
  CHECK(whole.events ==
        std::vector<Event>{message(Opcode::kBinary, textOf(concat({pattern(10), pattern(5)})))});
}

TEST_CASE("websocket: stream delivery points into the input and marks an empty message") {
  Bytes input = ot::ws::buildFrame(Opcode::kBinary, pattern(10), kRfcMask);
  MessageReader reader(Role::kServer, 100, Delivery::kStream);
  std::span<uint8_t> rest(input);
  auto step = reader.next(rest);
  REQUIRE(step.event == ReadEvent::kData);
  CHECK(step.chunk.data() == input.data() + 6);  // unmasked in place
  CHECK(Bytes(step.chunk.begin(), step.chunk.end()) == pattern(10));
  CHECK(step.messageBegin);
  CHECK(reader.currentFrame().payloadLength == 10);
  rest = rest.subspan(step.consumed);
  step = reader.next(rest);
  CHECK(step.event == ReadEvent::kData);
  CHECK(step.messageEnd);
  CHECK(step.chunk.empty());

  auto empty =
      readMessages(Role::kClient, ot::ws::buildFrame(Opcode::kBinary, {}), 0, Delivery::kStream);
  CHECK(empty.events ==
        std::vector<Event>{{ReadEvent::kData, Opcode::kBinary, "", true, true, 0, {}}});
}

TEST_CASE("websocket: the message size limit is enforced from the header alone") {
  // Only the header of a 64 KiB + 1 frame: the error comes before any payload.
  const auto header = ot::ws::encodeFrameHeader(Opcode::kBinary, true, 65537, kRfcMask);
  const Bytes headerOnly(header.view().begin(), header.view().end());
  auto tooBig = readMessages(Role::kServer, headerOnly, 1, Delivery::kWhole, 65536);
  CHECK(tooBig.error == Error::kMessageTooBig);
  CHECK(tooBig.consumed == headerOnly.size());
  CHECK(ot::ws::closeCodeFor(tooBig.error) == ot::ws::kCloseMessageTooBig);
  CHECK(readMessages(Role::kServer, headerOnly, 0, Delivery::kStream, 65536).error ==
        Error::kMessageTooBig);

  // Exactly at the limit is fine, in one frame or in fragments.
  const Bytes exact = ot::ws::buildFrame(Opcode::kBinary, pattern(65536), kRfcMask);
  auto ok = readMessages(Role::kServer, exact, 0, Delivery::kWhole, 65536);
  CHECK(ok.error == Error::kNone);
  REQUIRE(ok.events.size() == 1);
  CHECK(ok.events[0].data.size() == 65536);

  // The limit counts the whole message across fragments.
  const Bytes fragmented =
      concat({ot::ws::buildFrame(Opcode::kBinary, pattern(60), kRfcMask, false),
              ot::ws::buildPing(pattern(100), kRfcMask),
              ot::ws::buildFrame(Opcode::kContinuation, pattern(40), kRfcMask)});
  CHECK(readMessages(Role::kServer, fragmented, 0, Delivery::kWhole, 100).error == Error::kNone);
  auto over = readMessages(Role::kServer, fragmented, 0, Delivery::kWhole, 99);
  CHECK(over.error == Error::kMessageTooBig);
  CHECK(over.consumed == fragmented.size() - 40);  // at the continuation's header
}

TEST_CASE("websocket: the size limit can change at runtime") {
  constexpr uint64_t kBeforeAttach = 64 * 1024;
  constexpr uint64_t kAfterAttach = 16 + 32 * 1024;
  MessageReader reader(Role::kServer, kBeforeAttach);
  const Bytes big = ot::ws::buildFrame(Opcode::kBinary, pattern(40000), kRfcMask);
  auto first = readMessages(reader, big, 0);
  CHECK(first.error == Error::kNone);
  CHECK(first.events.size() == 1);

  reader.setMaxMessageSize(kAfterAttach);
  CHECK(reader.maxMessageSize() == kAfterAttach);
  const Bytes fits = ot::ws::buildFrame(Opcode::kBinary, pattern(kAfterAttach), kRfcMask);
  CHECK(readMessages(reader, fits, 7).events.size() == 1);
  auto second = readMessages(reader, big, 0);
  CHECK(second.error == Error::kMessageTooBig);

  // Lowered below what a fragmented message already holds: the next fragment fails.
  MessageReader shrinking(Role::kServer, 1000);
  Bytes part1 = ot::ws::buildFrame(Opcode::kBinary, pattern(500), kRfcMask, false);
  CHECK(readMessages(shrinking, part1, 0).error == Error::kNone);
  shrinking.setMaxMessageSize(100);
  CHECK(readMessages(shrinking, ot::ws::buildFrame(Opcode::kContinuation, {}, kRfcMask), 0).error ==
        Error::kMessageTooBig);
}

TEST_CASE("websocket: delivery can change between messages") {
  MessageReader reader(Role::kClient, 1000, Delivery::kWhole);
  CHECK(readMessages(reader, kHelloUnmasked, 0).events ==
        std::vector<Event>{message(Opcode::kText, "Hello")});
  reader.setDelivery(Delivery::kStream);
  CHECK(readMessages(reader, kHelloUnmasked, 0).events ==
        std::vector<Event>{{ReadEvent::kData, Opcode::kText, "Hello", true, false, 0, {}},
                           {ReadEvent::kData, Opcode::kText, "", false, true, 0, {}}});
}

// --- UTF-8 -------------------------------------------------------------------------------------

TEST_CASE("websocket: UTF-8 validation") {
  for (std::string_view valid :
       {"", "plain ascii", "\xC2\x80", "\xDF\xBF", "\xE0\xA0\x80", "\xED\x9F\xBF", "\xEE\x80\x80",
        "\xEF\xBF\xBF", "\xF0\x90\x80\x80", "\xF4\x8F\xBF\xBF",
        "\xCE\xBA\xE1\xBD\xB9\xCF\x83\xCE\xBC\xCE\xB5"}) {
    CAPTURE(valid);
    CHECK(ot::ws::isValidUtf8(frameBytesOf(valid)));
  }
  for (std::string_view invalid :
       {"\x80", "\xBF", "\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xE0\x9F\xBF", "\xED\xA0\x80",
        "\xED\xBF\xBF", "\xF0\x80\x80\x80", "\xF0\x8F\xBF\xBF", "\xF4\x90\x80\x80",
        "\xF5\x80\x80\x80", "\xFE", "\xFF", "\xC2", "\xE2\x82", "\xF0\x90\x80", "\xC2\x41",
        "a\xE2\x82z"}) {
    CAPTURE(invalid);
    CHECK_FALSE(ot::ws::isValidUtf8(frameBytesOf(invalid)));
  }
  // The failing index is the first byte that cannot continue the text.
  ot::ws::Utf8Validator v;
  CHECK(v.feed(frameBytesOf("ab\xE0\x80")) == 3);
  ot::ws::Utf8Validator split;
  CHECK(split.feed(frameBytesOf("\xF0\x9F")) == 2);
  CHECK_FALSE(split.complete());
  CHECK(split.feed(frameBytesOf("\x98")) == 1);
  CHECK(split.feed(frameBytesOf("\x80!")) == 2);
  CHECK(split.complete());
}

TEST_CASE("websocket: text is validated across fragments") {
  auto fragments = [](std::initializer_list<std::string_view> parts) {
    Bytes out;
    size_t i = 0;
    for (std::string_view p : parts) {
      const Opcode op = i == 0 ? Opcode::kText : Opcode::kContinuation;
      const bool fin = ++i == parts.size();
      const Bytes frame = ot::ws::buildFrame(op, frameBytesOf(p), kRfcMask, fin);
      out.insert(out.end(), frame.begin(), frame.end());
    }
    return out;
  };
  struct Case {
    Bytes input;
    Error error;
    std::string text;
  };
  const std::vector<Case> cases = {
      {fragments({"\xE2", "\x82", "\xAC"}), Error::kNone, "\xE2\x82\xAC"},
      {fragments({"a\xF0\x9F", "\x98\x80", "b"}), Error::kNone,
       "a\xF0\x9F\x98\x80"
       "b"},
      {fragments({"\xE2\x82", ""}), Error::kInvalidUtf8, ""},      // truncated at message end
      {fragments({"\xC0", "\x80"}), Error::kInvalidUtf8, ""},      // overlong lead
      {fragments({"\xE0", "\x80\x80"}), Error::kInvalidUtf8, ""},  // overlong 3-byte
      {fragments({"\xF0\x80", "\x80\x80"}), Error::kInvalidUtf8, ""},
      {fragments({"\xED", "\xA0\x80"}), Error::kInvalidUtf8, ""},  // surrogate U+D800
      {fragments({"ok \xED\xBF", "\xBF"}), Error::kInvalidUtf8, ""},
      {fragments({"\xF4\x90", "\x80\x80"}), Error::kInvalidUtf8, ""},  // above U+10FFFF
  };
  for (const Case& c : cases) {
    CAPTURE(c.text);
    for (Delivery delivery : {Delivery::kWhole, Delivery::kWholeView, Delivery::kStream}) {
      for (size_t piece : {size_t{0}, size_t{1}}) {
        const ReadOutcome got = readMessages(Role::kServer, c.input, piece, delivery);
        CHECK(got.error == c.error);
        if (c.error == Error::kNone) {
          REQUIRE(!got.merged().empty());
          CHECK(got.merged().back().data == c.text);
        }
      }
    }
  }
  CHECK(ot::ws::closeCodeFor(Error::kInvalidUtf8) == ot::ws::kCloseInvalidData);
  // Binary messages are not UTF-8 checked.
  CHECK(readMessages(Role::kClient, ot::ws::buildFrame(Opcode::kBinary, frameBytesOf("\xFF")), 0)
            .error == Error::kNone);
  // The error is reported at the offending byte: "\xED" then "\xA0" in the second fragment.
  const Bytes surrogate = fragments({"\xED", "\xA0\x80"});
  auto got = readMessages(Role::kServer, surrogate, 0);
  CHECK(got.consumed == 7 + 6 + 1);
}

// --- Close frames ------------------------------------------------------------------------------

TEST_CASE("websocket: close codes valid on the wire") {
  for (uint16_t code :
       std::initializer_list<uint16_t>{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012,
                                       1013, 1014, 3000, 3999, 4000, 4999}) {
    CAPTURE(code);
    CHECK(ot::ws::isValidWireCloseCode(code));
  }
  for (uint16_t code : std::initializer_list<uint16_t>{0, 999, 1004, 1005, 1006, 1015, 1016, 1100,
                                                       2000, 2999, 5000, 65535}) {
    CAPTURE(code);
    CHECK_FALSE(ot::ws::isValidWireCloseCode(code));
  }
  CHECK(ot::ws::kCloseNormal == 1000);
  CHECK(ot::ws::kCloseGoingAway == 1001);
  CHECK(ot::ws::kCloseProtocolError == 1002);
  CHECK(ot::ws::kCloseInvalidData == 1007);
  CHECK(ot::ws::kClosePolicyViolation == 1008);
  CHECK(ot::ws::kCloseMessageTooBig == 1009);
  CHECK(ot::ws::kCloseInternalError == 1011);
  CHECK(ot::ws::kCloseServiceRestart == 1012);
}

TEST_CASE("websocket: close bodies parse and build") {
  const Bytes body = {0x03, 0xF4, 'd', 'r', 'a', 'i', 'n'};
  auto parsed = ot::ws::parseCloseBody(body);  // the reason points into `body`
  CHECK(parsed.error == Error::kNone);
  CHECK(parsed.code == 1012);
  CHECK(parsed.reason == "drain");
  auto empty = ot::ws::parseCloseBody({});
  CHECK(empty.error == Error::kNone);
  CHECK(empty.code == ot::ws::kCloseNoStatus);
  CHECK(ot::ws::parseCloseBody(Bytes{0x03}).error == Error::kCloseBodyTooShort);
  CHECK(ot::ws::parseCloseBody(Bytes{0x03, 0xED}).error == Error::kInvalidCloseCode);  // 1005
  CHECK(ot::ws::parseCloseBody(Bytes{0x03, 0xEE}).error == Error::kInvalidCloseCode);  // 1006
  CHECK(ot::ws::parseCloseBody(Bytes{0x03, 0xF7}).error == Error::kInvalidCloseCode);  // 1015
  CHECK(ot::ws::parseCloseBody(Bytes{0x03, 0xE8, 0xC0, 0x80}).error == Error::kInvalidUtf8);

  CHECK(ot::ws::buildClose(1012, "restart") ==
        Bytes{0x88, 0x09, 0x03, 0xF4, 'r', 'e', 's', 't', 'a', 'r', 't'});
  CHECK(ot::ws::buildClose(ot::ws::kCloseNoStatus, "ignored") == Bytes{0x88, 0x00});
  CHECK(ot::ws::buildClose(1000, "", kRfcMask) ==
        Bytes{0x88, 0x82, 0x37, 0xfa, 0x21, 0x3d, 0x03 ^ 0x37, 0xE8 ^ 0xfa});

  // A long reason is cut to 123 bytes without splitting a character.
  std::string reason(121, 'a');
  reason += "\xE2\x82\xAC";  // bytes 121..123: the 3-byte sign would end past the limit
  const Bytes frame = ot::ws::buildClose(1000, reason);
  CHECK(frame.size() == 2 + 2 + 121);
  auto reread = readMessages(Role::kClient, frame, 0);
  CHECK(reread.error == Error::kNone);
  REQUIRE(reread.events.size() == 1);
  CHECK(reread.events[0].reason == std::string(121, 'a'));
  CHECK(ot::ws::buildPing(pattern(200)).size() == 2 + 125);
}

TEST_CASE("websocket: close frames through the reader") {
  auto got = readMessages(Role::kServer, ot::ws::buildClose(1001, "going", kRfcMask), 1);
  REQUIRE(got.events.size() == 1);
  CHECK(got.events[0].kind == ReadEvent::kControl);
  CHECK(got.events[0].opcode == Opcode::kClose);
  CHECK(got.events[0].closeCode == 1001);
  CHECK(got.events[0].reason == "going");

  auto bare = readMessages(Role::kClient, Bytes{0x88, 0x00}, 0);
  REQUIRE(bare.events.size() == 1);
  CHECK(bare.events[0].closeCode == ot::ws::kCloseNoStatus);

  CHECK(firstError(Role::kClient, Bytes{0x88, 0x01, 0x03}) == Error::kCloseBodyTooShort);
  CHECK(firstError(Role::kClient, Bytes{0x88, 0x02, 0x03, 0xED}) == Error::kInvalidCloseCode);
  CHECK(firstError(Role::kClient, Bytes{0x88, 0x02, 0x0B, 0xB7}) == Error::kInvalidCloseCode);
  CHECK(firstError(Role::kClient, Bytes{0x88, 0x03, 0x03, 0xE8, 0xFF}) == Error::kInvalidUtf8);
  CHECK(ot::ws::closeCodeFor(Error::kCloseBodyTooShort) == 1002);
  CHECK(ot::ws::closeCodeFor(Error::kInvalidCloseCode) == 1002);
}

TEST_CASE("websocket: every error has a name and a close code") {
  for (uint8_t i = 0; i <= static_cast<uint8_t>(Error::kTooManyFragments); ++i) {
    const auto error = static_cast<Error>(i);
    CHECK(ot::ws::errorName(error) != "unknown");
    const uint16_t code = ot::ws::closeCodeFor(error);
    CHECK((code == 1000 || code == 1002 || code == 1007 || code == 1009));
  }
  CHECK(ot::ws::closeCodeFor(Error::kMessageTooBig) == 1009);
  CHECK(ot::ws::closeCodeFor(Error::kTooManyFragments) == 1009);
  CHECK(ot::ws::closeCodeFor(Error::kReservedBits) == 1002);
}

TEST_CASE("websocket: per-connection state stays small") {
  // relayd keeps 100,000 idle bridges; the codec's share of each must stay a few cache lines.
  CHECK(sizeof(FrameDecoder) <= 64);
  CHECK(sizeof(MessageReader) <= 160);
}
