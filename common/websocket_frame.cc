#include "common/websocket_frame.h"

#include <algorithm>
#include <cstring>

namespace ot::ws {

uint16_t closeCodeFor(Error error) {
  switch (error) {
    case Error::kNone:
      return kCloseNormal;
    case Error::kInvalidUtf8:
      return kCloseInvalidData;
    case Error::kMessageTooBig:
    case Error::kTooManyFragments:
      return kCloseMessageTooBig;
    case Error::kReservedBits:
    case Error::kUnknownOpcode:
    case Error::kFragmentedControl:
    case Error::kControlTooLong:
    case Error::kLengthHighBit:
    case Error::kNonMinimalLength:
    case Error::kMaskRequired:
    case Error::kMaskNotAllowed:
    case Error::kUnexpectedContinuation:
    case Error::kExpectedContinuation:
    case Error::kCloseBodyTooShort:
    case Error::kInvalidCloseCode:
      break;
  }
  return kCloseProtocolError;
}

std::string_view errorName(Error error) {
  switch (error) {
    case Error::kNone:
      return "none";
    case Error::kReservedBits:
      return "reserved_bits";
    case Error::kUnknownOpcode:
      return "unknown_opcode";
    case Error::kFragmentedControl:
      return "fragmented_control";
    case Error::kControlTooLong:
      return "control_too_long";
    case Error::kLengthHighBit:
      return "length_high_bit";
    case Error::kNonMinimalLength:
      return "non_minimal_length";
    case Error::kMaskRequired:
      return "mask_required";
    case Error::kMaskNotAllowed:
      return "mask_not_allowed";
    case Error::kUnexpectedContinuation:
      return "unexpected_continuation";
    case Error::kExpectedContinuation:
      return "expected_continuation";
    case Error::kCloseBodyTooShort:
      return "close_body_too_short";
    case Error::kInvalidCloseCode:
      return "invalid_close_code";
    case Error::kInvalidUtf8:
      return "invalid_utf8";
    case Error::kMessageTooBig:
      return "message_too_big";
    case Error::kTooManyFragments:
      return "too_many_fragments";
  }
  return "unknown";
}

namespace {

bool isKnownOpcode(uint8_t op) {
  return op <= 0x2 || (op >= 0x8 && op <= 0xA);
}

uint8_t extendedLengthSize(uint8_t len7) {
  if (len7 == 126) return 2;
  if (len7 == 127) return 8;
  return 0;
}

}  // namespace

// --- FrameDecoder -----------------------------------------------------------------------------

// Header bytes are taken one at a time so each check runs on the byte that decides it; an error
// is therefore reported at the same offset however the input was split.
Error FrameDecoder::acceptHeaderByte(uint8_t byte) {
  raw_[have_++] = byte;
  if (have_ == 1) {
    if ((byte & 0x70) != 0) return Error::kReservedBits;
    const uint8_t op = byte & 0x0F;
    if (!isKnownOpcode(op)) return Error::kUnknownOpcode;
    header_ = FrameHeader{};
    payloadDone_ = 0;
    header_.fin = (byte & 0x80) != 0;
    header_.opcode = static_cast<Opcode>(op);
    if (isControl(header_.opcode) && !header_.fin) return Error::kFragmentedControl;
    return Error::kNone;
  }
  if (have_ == 2) {
    header_.masked = (byte & 0x80) != 0;
    if (role_ == Role::kServer && !header_.masked) return Error::kMaskRequired;
    if (role_ == Role::kClient && header_.masked) return Error::kMaskNotAllowed;
    const uint8_t len7 = byte & 0x7F;
    if (isControl(header_.opcode) && len7 > kMaxControlPayload) return Error::kControlTooLong;
    header_.payloadLength = len7;
    need_ = static_cast<uint8_t>(2 + extendedLengthSize(len7) + (header_.masked ? 4 : 0));
    return Error::kNone;
  }
  const uint8_t extSize = extendedLengthSize(raw_[1] & 0x7F);
  if (extSize == 8 && have_ == 3 && (byte & 0x80) != 0) return Error::kLengthHighBit;
  if (extSize != 0 && have_ == 2 + extSize) {
    uint64_t length = 0;
    for (uint8_t i = 2; i < have_; ++i) length = (length << 8) | raw_[i];
    // RFC 6455 5.2: "the minimal number of bytes MUST be used". Peers that pad lengths are
    // rejected rather than tolerated, so every frame we accept has exactly one encoding.
    const uint64_t minimum = extSize == 2 ? 126 : 0x10000;
    if (length < minimum) return Error::kNonMinimalLength;
    header_.payloadLength = length;
  }
  if (header_.masked && have_ == need_) {
    std::copy(raw_.begin() + (have_ - 4), raw_.begin() + have_, header_.maskKey.begin());
  }
  return Error::kNone;
}

DecodeStep FrameDecoder::readHeader(std::span<const uint8_t> input) {
  size_t used = 0;
  while (used < input.size()) {
    const Error error = acceptHeaderByte(input[used++]);
    if (error != Error::kNone) {
      error_ = error;
      phase_ = Phase::kError;
      return {DecodeEvent::kError, used, {}, error};
    }
    if (have_ >= 2 && have_ == need_) {
      phase_ = header_.payloadLength == 0 ? Phase::kFrameEnd : Phase::kPayload;
      return {DecodeEvent::kHeader, used, {}, Error::kNone};
    }
  }
  return {DecodeEvent::kNeedMore, used, {}, Error::kNone};
}

size_t FrameDecoder::payloadChunkSize(size_t available) const {
  const uint64_t remaining = header_.payloadLength - payloadDone_;
  return remaining < available ? static_cast<size_t>(remaining) : available;
}

DecodeStep FrameDecoder::decode(std::span<uint8_t> input) {
  switch (phase_) {
    case Phase::kError:
      return {DecodeEvent::kError, 0, {}, error_};
    case Phase::kHeader:
      return readHeader(input);
    case Phase::kFrameEnd:
      phase_ = Phase::kHeader;
      have_ = 0;
      need_ = 2;
      return {DecodeEvent::kFrameEnd, 0, {}, Error::kNone};
    case Phase::kPayload:
      break;
  }
  const size_t n = payloadChunkSize(input.size());
  if (n == 0) return {DecodeEvent::kNeedMore, 0, {}, Error::kNone};
  const std::span<uint8_t> chunk = input.first(n);
  if (header_.masked) maskInPlace(chunk, header_.maskKey, payloadDone_);
  payloadDone_ += n;
  if (payloadDone_ == header_.payloadLength) phase_ = Phase::kFrameEnd;
  return {DecodeEvent::kPayload, n, chunk, Error::kNone};
}

DecodeStep FrameDecoder::decodeInto(std::span<const uint8_t> input, std::span<uint8_t> out) {
  if (phase_ != Phase::kPayload) {
    // No payload bytes are touched outside kPayload, so the in-place path is read-only here.
    if (phase_ == Phase::kHeader) return readHeader(input);
    return decode({});
  }
  const size_t n = payloadChunkSize(std::min(input.size(), out.size()));
  if (n == 0) return {DecodeEvent::kNeedMore, 0, {}, Error::kNone};
  const std::span<uint8_t> chunk = out.first(n);
  if (header_.masked) {
    maskCopy(chunk, input.first(n), header_.maskKey, payloadDone_);
  } else {
    std::memcpy(chunk.data(), input.data(), n);
  }
  payloadDone_ += n;
  if (payloadDone_ == header_.payloadLength) phase_ = Phase::kFrameEnd;
  return {DecodeEvent::kPayload, n, chunk, Error::kNone};
}

// --- Encoding ---------------------------------------------------------------------------------

EncodedHeader encodeFrameHeader(Opcode opcode, bool fin, uint64_t payloadLength,
                                std::optional<MaskKey> mask) {
  EncodedHeader out;
  auto put = [&out](uint8_t byte) { out.bytes[out.size++] = byte; };
  put(static_cast<uint8_t>((fin ? 0x80 : 0x00) | static_cast<uint8_t>(opcode)));
  const uint8_t maskBit = mask ? 0x80 : 0x00;
  if (payloadLength < 126) {
    put(static_cast<uint8_t>(maskBit | payloadLength));
  } else if (payloadLength <= 0xFFFF) {
    put(static_cast<uint8_t>(maskBit | 126));
    put(static_cast<uint8_t>(payloadLength >> 8));
    put(static_cast<uint8_t>(payloadLength));
  } else {
    put(static_cast<uint8_t>(maskBit | 127));
    for (int shift = 56; shift >= 0; shift -= 8) put(static_cast<uint8_t>(payloadLength >> shift));
  }
  if (mask) {
    for (uint8_t b : *mask) put(b);
  }
  return out;
}

void maskInPlace(std::span<uint8_t> data, MaskKey key, uint64_t offset) {
  maskCopy(data, data, key, offset);
}

void maskCopy(std::span<uint8_t> out, std::span<const uint8_t> in, MaskKey key, uint64_t offset) {
  if (key == MaskKey{}) {  // the identity (otunnel's key): a copy at most
    if (out.data() != in.data() && !in.empty()) std::memmove(out.data(), in.data(), in.size());
    return;
  }
  // Rotate the key so that rotated[0] applies to in[0]; then whole words can be XORed.
  const auto phase = static_cast<unsigned>(offset & 3);
  std::array<uint8_t, 8> pattern{};
  for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = key[(phase + i) & 3];
  uint64_t word = 0;
  std::memcpy(&word, pattern.data(), sizeof(word));

  const uint8_t* from = in.data();
  uint8_t* to = out.data();
  const size_t size = in.size();
  size_t i = 0;
  // Four words per step: loads and stores the compiler turns into wide moves.
  for (; i + 32 <= size; i += 32) {
    uint64_t chunk[4];
    std::memcpy(chunk, from + i, sizeof(chunk));
    for (uint64_t& w : chunk) w ^= word;
    std::memcpy(to + i, chunk, sizeof(chunk));
  }
  for (; i + 8 <= size; i += 8) {
    uint64_t chunk = 0;
    std::memcpy(&chunk, from + i, sizeof(chunk));
    chunk ^= word;
    std::memcpy(to + i, &chunk, sizeof(chunk));
  }
  for (; i < size; ++i) to[i] = static_cast<uint8_t>(from[i] ^ pattern[i & 7]);
}

std::vector<uint8_t> buildFrame(Opcode opcode, std::span<const uint8_t> payload,
                                std::optional<MaskKey> mask, bool fin) {
  if (isControl(opcode) && payload.size() > kMaxControlPayload) {
    payload = payload.first(kMaxControlPayload);
  }
  const EncodedHeader header = encodeFrameHeader(opcode, fin, payload.size(), mask);
  std::vector<uint8_t> frame;
  frame.reserve(header.size + payload.size());
  frame.insert(frame.end(), header.bytes.begin(), header.bytes.begin() + header.size);
  frame.insert(frame.end(), payload.begin(), payload.end());
  if (mask) maskInPlace(std::span<uint8_t>(frame).subspan(header.size), *mask);
  return frame;
}

namespace {

std::span<const uint8_t> bytesOf(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

}  // namespace

std::vector<uint8_t> buildText(std::string_view text, std::optional<MaskKey> mask) {
  return buildFrame(Opcode::kText, bytesOf(text), mask);
}

std::vector<uint8_t> buildPing(std::span<const uint8_t> payload, std::optional<MaskKey> mask) {
  return buildFrame(Opcode::kPing, payload, mask);
}

std::vector<uint8_t> buildPong(std::span<const uint8_t> payload, std::optional<MaskKey> mask) {
  return buildFrame(Opcode::kPong, payload, mask);
}

std::vector<uint8_t> buildClose(uint16_t code, std::string_view reason,
                                std::optional<MaskKey> mask) {
  if (!isValidWireCloseCode(code)) return buildFrame(Opcode::kClose, {}, mask);
  constexpr size_t kMaxReason = kMaxControlPayload - 2;
  if (reason.size() > kMaxReason) {
    size_t cut = kMaxReason;
    // Back up over continuation bytes so the reason stays valid UTF-8.
    while (cut > 0 && (static_cast<uint8_t>(reason[cut]) & 0xC0) == 0x80) --cut;
    reason = reason.substr(0, cut);
  }
  std::vector<uint8_t> body;
  body.reserve(2 + reason.size());
  body.push_back(static_cast<uint8_t>(code >> 8));
  body.push_back(static_cast<uint8_t>(code));
  body.insert(body.end(), reason.begin(), reason.end());
  return buildFrame(Opcode::kClose, body, mask);
}

// --- Close frames -----------------------------------------------------------------------------

bool isValidWireCloseCode(uint16_t code) {
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) ||
         (code >= 3000 && code <= 4999);
}

CloseBody parseCloseBody(std::span<const uint8_t> payload) {
  CloseBody body;
  if (payload.empty()) return body;
  if (payload.size() == 1) {
    body.error = Error::kCloseBodyTooShort;
    return body;
  }
  body.code = static_cast<uint16_t>((payload[0] << 8) | payload[1]);
  if (!isValidWireCloseCode(body.code)) {
    body.error = Error::kInvalidCloseCode;
    return body;
  }
  const std::span<const uint8_t> reason = payload.subspan(2);
  if (!isValidUtf8(reason)) {
    body.error = Error::kInvalidUtf8;
    return body;
  }
  body.reason = {reinterpret_cast<const char*>(reason.data()), reason.size()};
  return body;
}

// --- UTF-8 ------------------------------------------------------------------------------------

size_t Utf8Validator::feed(std::span<const uint8_t> bytes) {
  for (size_t i = 0; i < bytes.size(); ++i) {
    const uint8_t b = bytes[i];
    if (pending_ != 0) {
      if (b < low_ || b > high_) return i;
      low_ = 0x80;
      high_ = 0xBF;
      --pending_;
      continue;
    }
    if (b < 0x80) continue;
    // Lead bytes: the narrowed bounds on the first continuation byte exclude overlong forms
    // (E0, F0), UTF-16 surrogates (ED) and code points above U+10FFFF (F4).
    if (b >= 0xC2 && b <= 0xDF) {
      pending_ = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      pending_ = 2;
      if (b == 0xE0) low_ = 0xA0;
      if (b == 0xED) high_ = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      pending_ = 3;
      if (b == 0xF0) low_ = 0x90;
      if (b == 0xF4) high_ = 0x8F;
    } else {
      return i;  // 0x80-0xC1 (stray continuation, overlong 2-byte lead) or 0xF5-0xFF
    }
  }
  return bytes.size();
}

bool isValidUtf8(std::span<const uint8_t> bytes) {
  Utf8Validator validator;
  return validator.feed(bytes) == bytes.size() && validator.complete();
}

}  // namespace ot::ws
