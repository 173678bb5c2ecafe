// Fuzzes the WebSocket frame decoder and message reader. The input is a byte stream as a peer
// would send it; it is decoded in both roles, whole, byte by byte and in pseudo-random pieces,
// and every way must reach the same outcome. Decoded frames are re-encoded and must reproduce
// the input bytes exactly (lengths are only accepted in minimal form), and delivered messages
// must survive an encode/decode round trip.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/websocket.h"

namespace {

using namespace ot::ws;
using Bytes = std::vector<uint8_t>;

void check(bool condition) {
  if (!condition) __builtin_trap();
}

// Piece sizes for one pass: 0 = whole input, 1 = byte by byte, otherwise pseudo-random in
// [1, 2 * seed] from a xorshift generator seeded by the input, so runs are reproducible.
class Splitter {
 public:
  Splitter(size_t mode, uint64_t seed) : mode_(mode), state_(seed | 1) {}
  size_t next(size_t remaining) {
    if (mode_ == 0) return remaining;
    if (mode_ == 1) return 1;
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return std::min<size_t>(remaining, 1 + state_ % (2 * mode_));
  }

 private:
  size_t mode_;
  uint64_t state_;
};

// An independent UTF-8 check written the slow way (decode each code point, then judge it), as
// an oracle for the validator's state machine.
bool referenceUtf8(std::span<const uint8_t> bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    const uint8_t lead = bytes[i];
    size_t length = 0;
    uint32_t cp = 0;
    if (lead < 0x80) {
      length = 1;
      cp = lead;
    } else if ((lead & 0xE0) == 0xC0) {
      length = 2;
      cp = lead & 0x1Fu;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3;
      cp = lead & 0x0Fu;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4;
      cp = lead & 0x07u;
    } else {
      return false;
    }
    if (bytes.size() - i < length) return false;
    for (size_t k = 1; k < length; ++k) {
      if ((bytes[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (bytes[i + k] & 0x3Fu);
    }
    const uint32_t shortest = length == 1 ? 0 : length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
    if (cp < shortest || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += length;
  }
  return true;
}

struct Frame {
  FrameHeader header;
  size_t start = 0;  // offset of the header in the input
  size_t end = 0;    // offset after the payload, once complete
  Bytes payload;
  bool ended = false;
  bool operator==(const Frame& o) const {
    return header.fin == o.header.fin && header.opcode == o.header.opcode &&
           header.masked == o.header.masked && header.maskKey == o.header.maskKey &&
           header.payloadLength == o.header.payloadLength && start == o.start && end == o.end &&
           payload == o.payload && ended == o.ended;
  }
};

struct FrameOutcome {
  std::vector<Frame> frames;
  Error error = Error::kNone;
  size_t consumed = 0;
  bool operator==(const FrameOutcome&) const = default;
};

// intoBuffer: decodeInto with a tiny output buffer instead of unmasking in place.
FrameOutcome decodeFrames(Role role, std::span<const uint8_t> data, Splitter split,
                          bool intoBuffer) {
  Bytes input(data.begin(), data.end());
  FrameDecoder decoder(role);
  FrameOutcome out;
  std::array<uint8_t, 3> small{};
  size_t pos = 0;
  while (pos < input.size() && out.error == Error::kNone) {
    const size_t piece = split.next(input.size() - pos);
    std::span<uint8_t> rest = std::span<uint8_t>(input).subspan(pos, piece);
    pos += piece;
    while (true) {
      const DecodeStep step = intoBuffer ? decoder.decodeInto(rest, small) : decoder.decode(rest);
      check(step.consumed <= rest.size());
      out.consumed += step.consumed;
      rest = rest.subspan(step.consumed);
      if (step.event == DecodeEvent::kNeedMore) {
        check(rest.empty());
        break;
      }
      if (step.event == DecodeEvent::kError) {
        check(step.error != Error::kNone && step.consumed > 0);
        out.error = step.error;
        break;
      }
      if (step.event == DecodeEvent::kHeader) {
        Frame frame;
        frame.header = decoder.header();
        frame.start = out.consumed;  // minus the header size, below
        out.frames.push_back(frame);
        check(decoder.payloadRemaining() == frame.header.payloadLength);
        check(!isControl(frame.header.opcode) ||
              (frame.header.fin && frame.header.payloadLength <= kMaxControlPayload));
        check(frame.header.masked == (role == Role::kServer));
        check(frame.header.payloadLength < (uint64_t{1} << 63));
      } else if (step.event == DecodeEvent::kPayload) {
        check(!out.frames.empty() && !step.payload.empty());
        check(step.payload.size() == step.consumed);
        if (intoBuffer) check(step.payload.data() == small.data());
        Bytes& payload = out.frames.back().payload;
        payload.insert(payload.end(), step.payload.begin(), step.payload.end());
      } else {
        check(step.consumed == 0 && !out.frames.empty());
        check(out.frames.back().payload.size() == out.frames.back().header.payloadLength);
        out.frames.back().ended = true;
        out.frames.back().end = out.consumed;
      }
    }
  }
  // A header may arrive over several calls, so its start is found from where it ended.
  for (Frame& frame : out.frames) {
    const EncodedHeader header =
        encodeFrameHeader(frame.header.opcode, frame.header.fin, frame.header.payloadLength,
                          frame.header.masked ? std::optional(frame.header.maskKey) : std::nullopt);
    frame.start -= header.size;
  }
  if (intoBuffer) check(std::equal(input.begin(), input.end(), data.begin()));
  return out;
}

// Re-encoding each complete frame must give back exactly the bytes it came from.
void checkReencode(const FrameOutcome& outcome, std::span<const uint8_t> data) {
  size_t expectStart = 0;
  for (const Frame& frame : outcome.frames) {
    check(frame.start == expectStart);
    if (!frame.ended) break;
    const std::optional<MaskKey> mask =
        frame.header.masked ? std::optional(frame.header.maskKey) : std::nullopt;
    const EncodedHeader header =
        encodeFrameHeader(frame.header.opcode, frame.header.fin, frame.header.payloadLength, mask);
    check(frame.end == frame.start + header.size + frame.payload.size());
    const auto at = data.begin() + static_cast<std::ptrdiff_t>(frame.start);
    check(std::equal(header.view().begin(), header.view().end(), at));
    Bytes payload = frame.payload;
    if (mask) maskInPlace(payload, *mask);
    check(std::equal(payload.begin(), payload.end(), at + header.size));
    expectStart = frame.end;
  }
}

struct Event {
  ReadEvent kind = ReadEvent::kNeedMore;
  Opcode opcode = Opcode::kContinuation;
  Bytes data;
  uint16_t closeCode = 0;
  bool operator==(const Event&) const = default;
};

struct ReadOutcome {
  std::vector<Event> events;  // stream chunks merged into one event per message
  Error error = Error::kNone;
  size_t consumed = 0;
  bool operator==(const ReadOutcome&) const = default;
};

ReadOutcome readMessages(Role role, std::span<const uint8_t> data, Splitter split,
                         Delivery delivery, uint64_t limit) {
  Bytes input(data.begin(), data.end());
  MessageReader reader(role, limit, delivery);
  ReadOutcome out;
  std::optional<Event> open;  // kStream: the message being pieced together
  size_t pos = 0;
  while (pos < input.size() && out.error == Error::kNone) {
    const size_t piece = split.next(input.size() - pos);
    std::span<uint8_t> rest = std::span<uint8_t>(input).subspan(pos, piece);
    pos += piece;
    while (true) {
      ReadStep step = reader.next(rest);
      check(step.consumed <= rest.size());
      out.consumed += step.consumed;
      rest = rest.subspan(step.consumed);
      if (step.event == ReadEvent::kNeedMore) {
        check(rest.empty());
        break;
      }
      if (step.event == ReadEvent::kError) {
        const uint16_t code = closeCodeFor(step.error);
        check(code == kCloseProtocolError || code == kCloseInvalidData ||
              code == kCloseMessageTooBig);
        out.error = step.error;
        break;
      }
      if (step.event == ReadEvent::kData) {
        check(delivery == Delivery::kStream);
        check(step.opcode == Opcode::kText || step.opcode == Opcode::kBinary);
        check(step.messageBegin == !open.has_value());
        check(!step.chunk.empty() || step.messageEnd);
        check(step.chunk.empty() || (step.chunk.data() >= input.data() &&
                                     step.chunk.data() < input.data() + input.size()));
        if (!open) open = Event{ReadEvent::kMessage, step.opcode, {}, 0};
        open->data.insert(open->data.end(), step.chunk.begin(), step.chunk.end());
        check(open->data.size() <= limit);
        if (step.messageEnd) {
          out.events.push_back(std::move(*open));
          open.reset();
        }
        continue;
      }
      check(delivery == Delivery::kWhole || step.event == ReadEvent::kControl);
      Event event{ReadEvent::kMessage, step.opcode, step.payload, 0};
      if (step.event == ReadEvent::kControl) {
        check(isControl(step.opcode) && step.payload.size() <= kMaxControlPayload);
        event.kind = ReadEvent::kControl;
        if (step.opcode == Opcode::kClose) {
          event.closeCode = step.closeCode;
          check(step.closeCode == kCloseNoStatus ? step.payload.empty()
                                                 : isValidWireCloseCode(step.closeCode));
          const std::string_view reason = step.closeReason();
          check(referenceUtf8({reinterpret_cast<const uint8_t*>(reason.data()), reason.size()}));
        }
      } else {
        check(step.opcode == Opcode::kText || step.opcode == Opcode::kBinary);
        check(step.payload.size() <= limit);
      }
      out.events.push_back(std::move(event));
    }
  }
  for (const Event& e : out.events) {
    if (e.kind == ReadEvent::kMessage && e.opcode == Opcode::kText) check(referenceUtf8(e.data));
  }
  return out;
}

// A delivered message, sent again as one frame by the same peer, reads back the same.
void checkMessageRoundTrip(Role role, const Event& event, uint64_t limit) {
  const std::optional<MaskKey> mask =
      role == Role::kServer ? std::optional(MaskKey{0x12, 0x34, 0x56, 0x78}) : std::nullopt;
  Bytes frame = buildFrame(event.opcode, event.data, mask);
  MessageReader reader(role, limit, Delivery::kWhole);
  ReadStep step = reader.next(frame);
  check(step.consumed == frame.size());
  check(step.event ==
        (event.kind == ReadEvent::kControl ? ReadEvent::kControl : ReadEvent::kMessage));
  check(step.opcode == event.opcode && step.payload == event.data);
  check(reader.next({}).event == ReadEvent::kNeedMore);
}

void fuzzRole(Role role, std::span<const uint8_t> data, uint64_t seed) {
  const FrameOutcome whole = decodeFrames(role, data, Splitter(0, seed), false);
  checkReencode(whole, data);
  for (size_t mode : {size_t{1}, size_t{3}, size_t{64}}) {
    check(decodeFrames(role, data, Splitter(mode, seed), false) == whole);
  }
  check(decodeFrames(role, data, Splitter(0, seed), true) == whole);
  check(decodeFrames(role, data, Splitter(5, seed), true) == whole);

  // A small limit exercises 1009 on ordinary inputs; a large one lets messages through.
  for (uint64_t limit : {uint64_t{100}, uint64_t{1} << 20}) {
    const ReadOutcome reference =
        readMessages(role, data, Splitter(0, seed), Delivery::kWhole, limit);
    for (Delivery delivery : {Delivery::kWhole, Delivery::kStream}) {
      for (size_t mode : {size_t{0}, size_t{1}, size_t{7}}) {
        check(readMessages(role, data, Splitter(mode, seed), delivery, limit) == reference);
      }
    }
    // The reader sees the frames the decoder sees; it may only stop earlier, never later.
    check(reference.consumed <= whole.consumed);
    if (reference.error == Error::kNone) {
      check(whole.error == Error::kNone && reference.consumed == whole.consumed);
    }
    if (whole.error != Error::kNone && reference.consumed == whole.consumed) {
      check(reference.error == whole.error);
    }
    for (const Event& event : reference.events) checkMessageRoundTrip(role, event, limit);
  }
}

void fuzzUtf8(std::span<const uint8_t> data, uint64_t seed) {
  Utf8Validator whole;
  const size_t wholeIndex = whole.feed(data);
  Utf8Validator pieces;
  Splitter split(3, seed);
  size_t pos = 0;
  size_t piecesIndex = data.size();
  while (pos < data.size()) {
    const size_t n = split.next(data.size() - pos);
    const size_t got = pieces.feed(data.subspan(pos, n));
    if (got < n) {
      piecesIndex = pos + got;
      break;
    }
    pos += n;
  }
  check(wholeIndex == piecesIndex);
  check(isValidUtf8(data) == referenceUtf8(data));
  if (wholeIndex == data.size()) check(whole.complete() == pieces.complete());

  const CloseBody body = parseCloseBody(data.first(std::min(data.size(), kMaxControlPayload)));
  if (body.error == Error::kNone && body.code != kCloseNoStatus) {
    const Bytes rebuilt = buildClose(body.code, body.reason);
    check(rebuilt.size() >= 2 &&
          std::equal(rebuilt.begin() + 2, rebuilt.end(), data.begin(),
                     data.begin() + static_cast<std::ptrdiff_t>(rebuilt.size() - 2)));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> input(data, size);
  uint64_t seed = size;
  for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) seed = seed * 131 + input[i];
  fuzzRole(Role::kServer, input, seed);
  fuzzRole(Role::kClient, input, seed);
  fuzzUtf8(input, seed);
  return 0;
}
