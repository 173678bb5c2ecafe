// Bridge control messages (docs/protocol.md, "Control messages"): the JSON text messages of a
// bridge. The client sends attach; the relay answers attached or attach_error and may later send
// drain. Pure: parsing never throws (bad JSON and wrong types come back as values), serializing
// never throws (text that is not UTF-8 is replaced, not refused). relayd uses parseClientMessage
// and the serializers of the answers; otunnel uses serializeAttach and parseRelayMessage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/bridge_frame.h"

namespace ot::bridge {

inline constexpr size_t kMaxRoutesPerAttach = 128;
inline constexpr uint32_t kMaxConnsPerBridge = 256;
inline constexpr size_t kMaxTokenLength = 512;
inline constexpr size_t kMaxNameLength = 64;  // origin and profile
// An origin reaches the relay in at most this many ways (profiles); profile_index is below it.
inline constexpr uint32_t kMaxProfiles = 8;
// The bridge protocol this code speaks (docs/protocol.md, "Versions"). Version 2 added pools:
// derived origin credentials, profile_index and the relay's "protocol" in attached. A relay
// that sends no "protocol" speaks version 1.
inline constexpr uint32_t kBridgeProtocolVersion = 2;
inline constexpr size_t kMaxBridgeIdLength = 128;
inline constexpr uint32_t kDefaultHeartbeatMs = 15000;
inline constexpr uint32_t kMinHeartbeatMs = 1000;
inline constexpr uint32_t kMaxHeartbeatMs = 300000;
// The ALPN value otunnel offers next to http/1.1 when it opens a bridge (docs/protocol.md
// section 1): a draining relay can refuse the bridge from the ClientHello, before the handshake.
inline constexpr std::string_view kBridgeAlpn = "otunnel-bridge";
// The close a relay sends when the tunnel's owner resets it (docs/protocol.md section 9): an
// application code (RFC 6455 allows 4000-4999), so a client may redial at once, skipping its
// backoff, and an older client still reads it as an ordinary close.
inline constexpr uint16_t kCloseReset = 4000;
inline constexpr std::string_view kCloseResetReason = "reset";

enum class AttachErrorCode : uint8_t {
  kBadToken,
  kCertNotReady,
  kInvalidRoute,
  kTooManyRoutes,
  kRouteConflict,
  kTooManyFailures,  // this address failed to attach too often lately: wait out the window
  kTooManyBridges,   // the tunnel has its most bridges on this relay
  kError,
};

[[nodiscard]] std::string_view attachErrorCodeName(AttachErrorCode code);
// The close that follows an attach_error the relay decided on: 1008 for a refusal, 1011 for
// kError (the relay's own failure). A malformed attach is answered kError with 1002 instead.
[[nodiscard]] uint16_t closeCodeFor(AttachErrorCode code);

// An attach as the relay accepts it: routes lowercased, deduplicated (first occurrence kept),
// never empty unless routeError says why; maxConns capped at kMaxConnsPerBridge.
struct AttachRequest {
  std::string token;
  std::vector<std::string> routes{""};
  // Set by parseClientMessage when a route is not "" or one DNS label (or `routes` is empty): the
  // invalid_route message, answered only once the token is known to be right. `routes` is then
  // empty. Not sent by serializeAttach.
  std::string routeError;
  uint32_t maxConns = kMaxConnsPerBridge;
  std::string origin;   // "" when unnamed
  std::string profile;  // "" when unnamed
  // The profile's place in the origin's list (0 first): the order `priority` balancing follows.
  uint32_t profileIndex = 0;
  uint32_t window = kDefaultWindow;

  friend bool operator==(const AttachRequest&, const AttachRequest&) = default;
};

struct AttachError {
  AttachErrorCode code = AttachErrorCode::kError;
  std::string message;
  uint16_t closeCode = 1011;  // the WebSocket close that follows; not sent in the JSON

  friend bool operator==(const AttachError&, const AttachError&) = default;
};

struct Limits {
  uint32_t maxConns = kMaxConnsPerBridge;
  uint32_t maxPayload = static_cast<uint32_t>(kMaxDataPayload);
  uint32_t window = kRelayWindow;  // the relay's receive window per connection

  friend bool operator==(const Limits&, const Limits&) = default;
};

struct Attached {
  std::string bridgeId;
  Limits limits;
  uint32_t heartbeatMs = kDefaultHeartbeatMs;
  // The relay's bridge protocol version: 1 when the relay sent none (it predates pools).
  uint32_t protocol = 1;

  friend bool operator==(const Attached&, const Attached&) = default;
};

struct Drain {
  friend bool operator==(const Drain&, const Drain&) = default;
};

using RelayMessage = std::variant<Attached, AttachError, Drain>;

enum class RelayMessageError : uint8_t {
  kNotJson,
  kNotObject,
  kUnknownType,  // a message type this client does not know: ignore it
  kBadField,     // a known type with a missing, mistyped or out-of-range field
};

[[nodiscard]] std::string_view relayMessageErrorName(RelayMessageError error);

// The relay's side. Checks, in this order: JSON object; more than kMaxRoutesPerAttach routes
// (too_many_routes, before any other field is looked at); type and field shapes (error, close
// 1002); token syntax (bad_token). Invalid routes are not refused here: they come back in
// AttachRequest::routeError, for the relay to answer invalid_route after the token matched.
// Unknown fields are ignored.
[[nodiscard]] Decoded<AttachRequest, AttachError> parseClientMessage(std::string_view text);

[[nodiscard]] std::string serializeAttach(const AttachRequest& attach);
[[nodiscard]] std::string serializeAttached(const Attached& attached);
[[nodiscard]] std::string serializeAttachError(const AttachError& error);
[[nodiscard]] std::string serializeDrain();

// The client's side. An attach_error code this build does not know reads as kError.
[[nodiscard]] Decoded<RelayMessage, RelayMessageError> parseRelayMessage(std::string_view text);

// ---- `status` (client to relay, after attached; docs/protocol.md 4.5, docs/pools-status.md) ----

// The largest status message the relay reads; a longer text message is ignored unread. Eight
// profiles with the longest names and errors fit well below it (serializeStatus bounds both).
inline constexpr size_t kMaxStatusMessageBytes = 4096;
// last_error is cut to this many bytes when sent, and refused above it when read.
inline constexpr size_t kMaxStatusErrorLength = 200;

// One profile of the sending origin as its dialer sees it.
struct ProfileReport {
  std::string name;  // "" when unnamed
  uint32_t index = 0;
  uint32_t linksWanted = 0;
  uint32_t linksUp = 0;
  uint64_t nextTryMs = 0;  // the wait until the profile's next dial; 0 when none is waiting
  std::string lastError;   // "" when none

  friend bool operator==(const ProfileReport&, const ProfileReport&) = default;
};

// What otunnel tells the relay about its whole origin (every profile, also those with no link
// on this relay): sent on every attached link when it changes and every few seconds.
struct StatusReport {
  std::vector<ProfileReport> profiles;  // at most kMaxProfiles

  friend bool operator==(const StatusReport&, const StatusReport&) = default;
};

[[nodiscard]] std::string serializeStatus(const StatusReport& report);

enum class ClientMessageError : uint8_t {
  kTooLarge,  // above kMaxStatusMessageBytes: not parsed
  kNotJson,
  kNotObject,
  kUnknownType,  // not `status`: ignored, as protocol.md 4.5 says
  kBadField,     // a `status` with a missing, mistyped or out-of-range field: ignored
};

// The relay's side, for a text message after attach. Unknown members are ignored; nothing here
// closes the bridge (the relay ignores what it cannot use).
[[nodiscard]] Decoded<StatusReport, ClientMessageError> parseAttachedClientMessage(
    std::string_view text);

}  // namespace ot::bridge
