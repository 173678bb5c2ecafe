// The bridge rules that apply when otunnel attaches as a named origin with a derived credential
// (issue 16, docs/pools-dialer.md "Version rule"), as pure logic: a relay older than bridge
// protocol 2 does not know origins and is refused; a bad_token or a 1008 "credential revoked"
// means the credential is gone (origin removed, generation rotated), which retrying cannot fix.
// Without a credential, otunnel behaves as before against any relay.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/bridge_control.h"

namespace ot::client {

// The WebSocket close reason relayd sends with 1008 when it closes a bridge whose credential
// stopped working.
inline constexpr std::string_view kCredentialRevokedReason = "credential revoked";

// Why an `attached` cannot be used (stop for good), or nullopt when it can.
[[nodiscard]] std::optional<std::string> refuseAttached(const bridge::Attached& attached,
                                                        bool withCredential);

// The text for a bad_token answer: with a credential, what probably happened to it.
[[nodiscard]] std::string badTokenText(bool withCredential, std::string_view relayMessage);

// True when the relay closed the bridge because its credential was revoked.
[[nodiscard]] bool credentialRevoked(uint16_t closeCode, std::string_view reason);

// The message for people when that happens.
[[nodiscard]] std::string revokedText();

}  // namespace ot::client
