// Bridge stream frames (docs/protocol.md, "Stream frames"): one per WebSocket binary message, a
// 5-byte header (kind, connection id) and a payload. Pure codec: no I/O, no exceptions, no
// allocation when decoding. A decoded Frame points into the caller's message, so it is valid only
// while that message is. StreamCredit is the per-connection flow-control ledger; each connection
// owns one per direction, touched only by the loop thread that owns the connection.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "common/result.h"

namespace ot::bridge {

inline constexpr size_t kFrameHeaderSize = 5;
inline constexpr size_t kMaxDataPayload = 32768;
inline constexpr size_t kMaxMessageBeforeAttach = 65536;
inline constexpr size_t kMaxMessageAfterAttach = kFrameHeaderSize + kMaxDataPayload;
inline constexpr size_t kMaxRouteLength = 63;           // one DNS label
inline constexpr size_t kMaxVisitorAddressLength = 64;  // "[<longest IPv6 text>]:65535" is 53
inline constexpr size_t kMaxResetTextLength = 123;      // what fits a WebSocket close reason

// Per-connection receive windows (initial credit), in data payload bytes.
inline constexpr uint32_t kMinWindow = 64 * 1024;  // a whole buffered ClientHello fits the first
inline constexpr uint32_t kMaxWindow = 16 * 1024 * 1024;
inline constexpr uint32_t kDefaultWindow = 512 * 1024;  // the client's, when attach omits it
inline constexpr uint32_t kRelayWindow = 512 * 1024;    // the relay's, for client->relay data
inline constexpr uint32_t kMaxCredit = 0x7FFFFFFF;      // credit beyond this is a protocol error

enum class FrameKind : uint8_t { kOpen = 1, kData = 2, kEnd = 3, kReset = 4, kCredit = 5 };

// Why a connection was reset. Informational: every reset aborts the connection the same way.
// Codes this build does not know decode as kUnspecified.
enum class ResetReason : uint8_t {
  kUnspecified = 0,
  kVisitorIoError = 1,  // the visitor's socket failed or was reset (relay)
  kClientIoError = 2,   // the local service's socket failed or was reset (client)
  kIdleTimeout = 3,
  kHalfCloseTimeout = 4,
  kConnectFailed = 5,  // the client could not reach its local service
  kTooSlow = 6,        // the far socket did not take data fast enough
  kFlowControlViolation = 7,
  kProtocolError = 8,
  kShuttingDown = 9,
};

enum class FrameError : uint8_t {
  kNone,
  kTooShort,     // no complete 5-byte header
  kUnknownKind,  // kind byte outside 1..5
  kZeroConnId,   // connection id 0 is reserved
  kBadLength,    // payload size wrong for the kind (end/credit/open/reset layout)
  kEmptyData,
  kDataTooLarge,  // data payload over kMaxDataPayload
  kZeroCredit,
  kRouteTooLong,
  kBadRoute,  // not "" and not one lowercase DNS label
  kAddressTooLong,
  kBadAddress,  // not "", "a.b.c.d:port" or "[ipv6]:port"
  kResetTextTooLong,
  kBadResetText,  // not UTF-8
};

[[nodiscard]] std::string_view frameKindName(FrameKind kind);
[[nodiscard]] std::string_view resetReasonName(ResetReason reason);
[[nodiscard]] std::string_view frameErrorName(FrameError error);

// One decoded frame: kind and connId always, the other fields by kind. Views point into the
// decoded message.
struct Frame {
  FrameKind kind = FrameKind::kData;
  uint32_t connId = 0;
  std::span<const uint8_t> payload;                // kData: 1..kMaxDataPayload bytes
  std::string_view route;                          // kOpen: "" is the tunnel's bare hostname
  std::string_view visitorAddress;                 // kOpen: "" when the relay does not know it
  ResetReason reason = ResetReason::kUnspecified;  // kReset
  std::string_view text;                           // kReset: UTF-8, may be empty
  uint32_t increment = 0;                          // kCredit: > 0
};

// A value or the reason there is none: ot::Result with the protocol's own error codes (ErrorKind
// is too coarse for them). A wrong access aborts; decoding never throws.
template <typename T, typename E>
using Decoded = ot::Result<T, E>;

// Decodes one whole binary message. Never reads outside `message`.
[[nodiscard]] Decoded<Frame, FrameError> decodeFrame(std::span<const uint8_t> message) noexcept;
// A temporary would leave the frame's views dangling.
Decoded<Frame, FrameError> decodeFrame(std::vector<uint8_t>&& message) = delete;

// The header alone, so a data payload can be written from its own buffer (writev).
[[nodiscard]] std::array<uint8_t, kFrameHeaderSize> encodeFrameHeader(FrameKind kind,
                                                                      uint32_t connId);

// Whole frames. Preconditions (asserted): connId != 0; data 1..kMaxDataPayload bytes; credit > 0.
// encodeOpen checks its arguments instead (the address comes from outside): nullopt if the id
// is 0 or either string is not valid. encodeReset cuts text to kMaxResetTextLength at a character
// boundary, and drops anything from the first byte that is not UTF-8.
[[nodiscard]] std::optional<std::vector<uint8_t>> encodeOpen(uint32_t connId,
                                                             std::string_view route,
                                                             std::string_view visitorAddress);
[[nodiscard]] std::vector<uint8_t> encodeData(uint32_t connId, std::span<const uint8_t> payload);
[[nodiscard]] std::vector<uint8_t> encodeEnd(uint32_t connId);
[[nodiscard]] std::vector<uint8_t> encodeReset(uint32_t connId, ResetReason reason,
                                               std::string_view text = {});
[[nodiscard]] std::vector<uint8_t> encodeCredit(uint32_t connId, uint32_t increment);

// One lowercase DNS label: 1-63 of a-z 0-9 -, no hyphen first or last (tunnel IDs, routes).
// Uppercase is refused rather than folded, so what a user typed is what runs.
[[nodiscard]] bool isDnsLabel(std::string_view label);
// "" (the bare hostname) or one DNS label.
[[nodiscard]] bool isValidRoute(std::string_view route);
// "" (unknown), "a.b.c.d:port" or "[ipv6]:port"; port 1..65535 without leading zeros.
[[nodiscard]] bool isValidVisitorAddress(std::string_view address);
// Length of the longest prefix that is well-formed UTF-8 (RFC 3629).
[[nodiscard]] size_t validUtf8Prefix(std::string_view text);

enum class CreditStatus : uint8_t {
  kOk,
  kExceeded,  // consume: more data than the credit allows (a flow-control violation)
  kOverflow,  // grant: credit would pass kMaxCredit (a protocol error)
};

// Credit for one direction of one connection, kept identically by its sender (consume when
// sending, grant when a credit frame arrives) and its receiver (consume when data arrives, grant
// when sending credit). A failed call leaves the ledger unchanged.
class StreamCredit {
 public:
  explicit StreamCredit(uint32_t window) : available_(window < kMaxCredit ? window : kMaxCredit) {}

  [[nodiscard]] CreditStatus consume(size_t bytes) {
    if (bytes > available_) return CreditStatus::kExceeded;
    available_ -= static_cast<uint32_t>(bytes);
    return CreditStatus::kOk;
  }
  // 0 is a no-op here; on the wire a zero increment is already a decode error.
  [[nodiscard]] CreditStatus grant(uint32_t increment) {
    if (increment > kMaxCredit - available_) return CreditStatus::kOverflow;
    available_ += increment;
    return CreditStatus::kOk;
  }
  [[nodiscard]] uint32_t available() const { return available_; }

 private:
  uint32_t available_;
};

}  // namespace ot::bridge
