// WebSocket (RFC 6455) frames: the resumable frame decoder, the header encoder, masking, close
// payloads and the error -> close code mapping. Pure and allocation-free except for the small
// whole-frame builders: a decoder is a few dozen bytes and owns no buffer, because relayd keeps
// up to 100,000 idle bridges per process. Payload bytes always stay in the caller's buffers.
// Not thread-safe; each decoder belongs to the one connection (and loop) that feeds it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace ot::ws {

enum class Opcode : uint8_t {
  kContinuation = 0x0,
  kText = 0x1,
  kBinary = 0x2,
  kClose = 0x8,
  kPing = 0x9,
  kPong = 0xA,
};

[[nodiscard]] constexpr bool isControl(Opcode op) {
  return (static_cast<uint8_t>(op) & 0x8) != 0;
}

// Which end we are. The server (relayd) requires masked frames and sends unmasked ones; the
// client (otunnel) requires unmasked frames and masks what it sends.
enum class Role : uint8_t { kServer, kClient };

using MaskKey = std::array<uint8_t, 4>;

inline constexpr size_t kMaxFrameHeaderSize = 14;
inline constexpr size_t kMaxControlPayload = 125;

// Close codes we send or name (RFC 6455 section 7.4.1).
inline constexpr uint16_t kCloseNormal = 1000;
inline constexpr uint16_t kCloseGoingAway = 1001;
inline constexpr uint16_t kCloseProtocolError = 1002;
inline constexpr uint16_t kCloseNoStatus = 1005;  // local only: a close frame without a body
inline constexpr uint16_t kCloseAbnormal = 1006;  // local only: the connection dropped
inline constexpr uint16_t kCloseInvalidData = 1007;
inline constexpr uint16_t kClosePolicyViolation = 1008;
inline constexpr uint16_t kCloseMessageTooBig = 1009;
inline constexpr uint16_t kCloseInternalError = 1011;
inline constexpr uint16_t kCloseServiceRestart = 1012;

// Why a stream was rejected. Every error is final: the connection must be closed with
// closeCodeFor(error). Detail values exist for counters and tests; peers only see the code.
enum class Error : uint8_t {
  kNone,
  // 1002, found in a frame header
  kReservedBits,       // RSV1-3 set: we never negotiate extensions
  kUnknownOpcode,      // 0x3-0x7, 0xB-0xF
  kFragmentedControl,  // control frame without FIN
  kControlTooLong,     // control frame payload > 125
  kLengthHighBit,      // 64-bit length with the most significant bit set
  kNonMinimalLength,   // length not in its shortest form (RFC 6455 5.2 says MUST)
  kMaskRequired,       // server role, unmasked frame from a client
  kMaskNotAllowed,     // client role, masked frame from a server
  // 1002, found across frames or in a close body
  kUnexpectedContinuation,  // continuation frame with no message in progress
  kExpectedContinuation,    // new text/binary frame while a fragmented message is in progress
  kCloseBodyTooShort,       // close payload of exactly one byte
  kInvalidCloseCode,        // close code that may not appear on the wire
  // 1007
  kInvalidUtf8,  // text message or close reason is not UTF-8
  // 1009
  kMessageTooBig,     // the announced length would take the message past the limit
  kTooManyFragments,  // a message in more frames than kMaxMessageFragments (websocket_message.h)
};

[[nodiscard]] uint16_t closeCodeFor(Error error);
[[nodiscard]] std::string_view errorName(Error error);  // snake_case, for metrics and logs

struct FrameHeader {
  bool fin = false;
  Opcode opcode = Opcode::kContinuation;
  bool masked = false;
  MaskKey maskKey{};  // meaningful only when masked
  uint64_t payloadLength = 0;
};

// --- Decoding ---------------------------------------------------------------------------------

// One step of FrameDecoder: each call reports exactly one event.
//   kNeedMore  all input was consumed (possibly part of a header); call again with more bytes.
//   kHeader    a complete, validated header: header() describes the frame now being read.
//   kPayload   `payload` holds the next unmasked bytes of the frame (never empty).
//   kFrameEnd  the frame's payload is complete (consumed == 0); the next byte starts a header.
//   kError     `error` says why; consumed counts bytes up to and including the offending one.
//              The decoder stays in error: later calls return the same error, consuming nothing.
enum class DecodeEvent : uint8_t { kNeedMore, kHeader, kPayload, kFrameEnd, kError };

struct DecodeStep {
  DecodeEvent event = DecodeEvent::kNeedMore;
  size_t consumed = 0;
  std::span<const uint8_t> payload;  // kPayload: unmasked bytes, in the input or `out` buffer
  Error error = Error::kNone;
};

// Resumable frame decoder. Feed bytes in any pieces; the header (2..14 bytes) is assembled in a
// 14-byte array and validated as early as possible (a bad first byte fails on that byte). Length
// limits are the caller's: MessageReader checks them at kHeader, before any payload is read.
class FrameDecoder {
 public:
  explicit FrameDecoder(Role role) : role_(role) {}

  // Unmasks payload in place inside `input`, so kPayload points into it.
  [[nodiscard]] DecodeStep decode(std::span<uint8_t> input);
  // Leaves `input` untouched and unmasks into `out` in the same pass as the copy (at most
  // out.size() bytes per step; `out` must not be empty while payload remains).
  [[nodiscard]] DecodeStep decodeInto(std::span<const uint8_t> input, std::span<uint8_t> out);

  // The frame being read, valid from kHeader until the next header starts (payloadRemaining
  // too; while a header is half read it only promises not to exceed the final length).
  [[nodiscard]] const FrameHeader& header() const { return header_; }
  [[nodiscard]] uint64_t payloadRemaining() const { return header_.payloadLength - payloadDone_; }
  // Payload of the current frame is being read (a header is complete, its payload is not).
  [[nodiscard]] bool inPayload() const { return phase_ == Phase::kPayload; }
  // Payload bytes of the current frame read so far.
  [[nodiscard]] uint64_t payloadDone() const { return payloadDone_; }
  [[nodiscard]] Role role() const { return role_; }

 private:
  enum class Phase : uint8_t { kHeader, kPayload, kFrameEnd, kError };

  [[nodiscard]] DecodeStep readHeader(std::span<const uint8_t> input);
  [[nodiscard]] Error acceptHeaderByte(uint8_t byte);
  [[nodiscard]] size_t payloadChunkSize(size_t available) const;

  Role role_;
  Phase phase_ = Phase::kHeader;
  uint8_t have_ = 0;  // header bytes collected so far
  uint8_t need_ = 2;  // header bytes needed, known once the second byte arrived
  Error error_ = Error::kNone;
  std::array<uint8_t, kMaxFrameHeaderSize> raw_{};
  FrameHeader header_;
  uint64_t payloadDone_ = 0;
};

// --- Encoding ---------------------------------------------------------------------------------

// Header bytes for a frame, kept apart from the payload so the caller can writev both without
// copying. Lengths use their minimal encoding.
struct EncodedHeader {
  std::array<uint8_t, kMaxFrameHeaderSize> bytes{};
  uint8_t size = 0;
  [[nodiscard]] std::span<const uint8_t> view() const { return {bytes.data(), size}; }
};

[[nodiscard]] EncodedHeader encodeFrameHeader(Opcode opcode, bool fin, uint64_t payloadLength,
                                              std::optional<MaskKey> mask = std::nullopt);

// XORs `data` with the key, where data[0] is byte `offset` of the frame payload. Masking is its
// own inverse, and a payload may be masked in pieces: call again with offset += data.size().
void maskInPlace(std::span<uint8_t> data, MaskKey key, uint64_t offset = 0);
// The copy and the XOR in one pass: out[i] = in[i] ^ key[(offset + i) % 4] for every byte of
// `in` (out.size() >= in.size()). `out` may be `in` itself (then it is maskInPlace), but must not
// overlap it otherwise.
void maskCopy(std::span<uint8_t> out, std::span<const uint8_t> in, MaskKey key,
              uint64_t offset = 0);

// Whole frames for small payloads (control frames, attach JSON). The client passes a fresh
// random mask; the server passes none. Control payloads are cut to 125 bytes, the most a
// control frame can carry.
[[nodiscard]] std::vector<uint8_t> buildFrame(Opcode opcode, std::span<const uint8_t> payload,
                                              std::optional<MaskKey> mask = std::nullopt,
                                              bool fin = true);
[[nodiscard]] std::vector<uint8_t> buildText(std::string_view text,
                                             std::optional<MaskKey> mask = std::nullopt);
[[nodiscard]] std::vector<uint8_t> buildPing(std::span<const uint8_t> payload,
                                             std::optional<MaskKey> mask = std::nullopt);
[[nodiscard]] std::vector<uint8_t> buildPong(std::span<const uint8_t> payload,
                                             std::optional<MaskKey> mask = std::nullopt);
// A code that may not be sent (e.g. kCloseNoStatus) yields an empty close body. The reason is
// cut to 123 bytes at a character boundary.
[[nodiscard]] std::vector<uint8_t> buildClose(uint16_t code, std::string_view reason = {},
                                              std::optional<MaskKey> mask = std::nullopt);

// --- Close frames -----------------------------------------------------------------------------

// 1000-1003, 1007-1014, 3000-4999. 1004 is reserved; 1005, 1006 and 1015 never go on the wire.
[[nodiscard]] bool isValidWireCloseCode(uint16_t code);

struct CloseBody {
  Error error = Error::kNone;
  uint16_t code = kCloseNoStatus;  // kCloseNoStatus when the body is empty
  std::string_view reason;         // points into the parsed payload
};

// Parses an (unmasked) close payload: empty, or a valid code followed by a UTF-8 reason.
[[nodiscard]] CloseBody parseCloseBody(std::span<const uint8_t> payload);

// --- UTF-8 ------------------------------------------------------------------------------------

// Incremental UTF-8 validation (no overlongs, no surrogates, nothing above U+10FFFF), so text can
// be checked as fragments arrive, whatever the split between them.
class Utf8Validator {
 public:
  // Returns the index of the first invalid byte in `bytes`, or bytes.size() if none is invalid
  // so far. After a failure the validator must not be fed again.
  [[nodiscard]] size_t feed(std::span<const uint8_t> bytes);
  // True when no multi-byte sequence is left open.
  [[nodiscard]] bool complete() const { return pending_ == 0; }
  void reset() { *this = Utf8Validator(); }

 private:
  uint8_t pending_ = 0;  // continuation bytes still expected
  uint8_t low_ = 0x80;   // bounds for the next continuation byte
  uint8_t high_ = 0xBF;
};

[[nodiscard]] bool isValidUtf8(std::span<const uint8_t> bytes);

}  // namespace ot::ws
