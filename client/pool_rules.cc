#include "client/pool_rules.h"

namespace ot::client {

std::optional<std::string> refuseAttached(const bridge::Attached& attached, bool withCredential) {
  if (!withCredential || attached.protocol >= 2) return std::nullopt;
  return "this relay speaks bridge protocol " + std::to_string(attached.protocol) +
         " and does not know origins; upgrade it or use the tunnel token";
}

std::string badTokenText(bool withCredential, std::string_view relayMessage) {
  std::string text = "attach_error bad_token";
  if (!relayMessage.empty()) text += ": " + std::string(relayMessage);
  if (withCredential) {
    text +=
        " (the origin credential is not valid: the origin was removed or the tunnel's "
        "credentials were rotated; ask the tunnel's owner for the current credential)";
  }
  return text;
}

bool credentialRevoked(uint16_t closeCode, std::string_view reason) {
  return closeCode == 1008 && reason == kCredentialRevokedReason;
}

std::string revokedText() {
  return "the relay closed the bridge: credential revoked (the origin was removed or the "
         "tunnel's credentials were rotated); not retrying";
}

}  // namespace ot::client
