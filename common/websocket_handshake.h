// The WebSocket opening handshake (RFC 6455 section 4), independent of any HTTP parser: requests
// and responses come in as a method/status and a list of (name, value) header views that the
// caller owns for the duration of the call. relayd validates upgrades and builds the 101; otunnel
// builds the request (with a nonce it supplies, so tests are deterministic) and checks the 101.
// No extensions and no subprotocols are ever negotiated.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ot::ws {

struct HttpHeader {
  std::string_view name;  // matched case-insensitively
  std::string_view value;
};
using HeaderList = std::span<const HttpHeader>;

inline constexpr std::string_view kHandshakeGuid = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
inline constexpr std::string_view kSupportedVersion = "13";

// base64(SHA-1(key + GUID)), the Sec-WebSocket-Accept value. Empty if OpenSSL fails.
[[nodiscard]] std::string acceptKey(std::string_view secWebSocketKey);
// A Sec-WebSocket-Key value: base64 of exactly 16 bytes, in canonical form.
[[nodiscard]] bool isValidClientKey(std::string_view key);

// --- Server side ------------------------------------------------------------------------------

enum class UpgradeError : uint8_t {
  kNone,
  kMethodNotGet,          // 400
  kHttpVersion,           // 400: older than HTTP/1.1
  kNotWebSocket,          // 426: no "websocket" token in Upgrade
  kConnectionNotUpgrade,  // 400: no "upgrade" token in Connection
  kVersionMissing,        // 400
  kVersionUnsupported,    // 426: answer with "Sec-WebSocket-Version: 13"
  kKeyMissing,            // 400
  kKeyInvalid,            // 400: not base64 of 16 bytes, or more than one key
};

struct UpgradeRequest {
  std::string_view method;
  int httpMajor = 1;
  int httpMinor = 1;
  HeaderList headers;
};

struct UpgradeCheck {
  UpgradeError error = UpgradeError::kNone;
  std::string_view key;  // the trimmed Sec-WebSocket-Key, into the caller's header value
};

[[nodiscard]] UpgradeCheck checkUpgradeRequest(const UpgradeRequest& request);
// The HTTP status to refuse with (400 or 426), 101 for kNone.
[[nodiscard]] int httpStatusFor(UpgradeError error);
// A stable snake_case code and a one-line message, for the JSON error body.
[[nodiscard]] std::string_view upgradeErrorName(UpgradeError error);
[[nodiscard]] std::string_view upgradeErrorMessage(UpgradeError error);

// The complete "101 Switching Protocols" response head for a request whose key was accepted.
[[nodiscard]] std::string buildUpgradeResponse(std::string_view key);

// --- Client side ------------------------------------------------------------------------------

struct ClientHandshake {
  std::string request;  // the complete request head, ready to write
  std::string key;      // keep it to check the response
};

// nullopt if host, target or an extra header would break the request (empty, CR, LF or NUL, or a
// target not starting with '/').
[[nodiscard]] std::optional<ClientHandshake> buildClientRequest(std::string_view host,
                                                                std::string_view target,
                                                                std::span<const uint8_t, 16> nonce,
                                                                HeaderList extraHeaders = {});

enum class ResponseError : uint8_t {
  kNone,
  kNotSwitchingProtocols,  // status other than 101
  kNotWebSocket,           // Upgrade missing or not "websocket"
  kConnectionNotUpgrade,
  kAcceptMismatch,       // Sec-WebSocket-Accept missing, repeated or wrong
  kUnexpectedExtension,  // we offered none
  kUnexpectedProtocol,   // we offered none
};

[[nodiscard]] ResponseError checkUpgradeResponse(int status, HeaderList headers,
                                                 std::string_view key);
[[nodiscard]] std::string_view responseErrorName(ResponseError error);

}  // namespace ot::ws
