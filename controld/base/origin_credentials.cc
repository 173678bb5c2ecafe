#include "controld/base/origin_credentials.h"

#include <algorithm>
#include <mutex>

#include "common/base64.h"
#include "common/bridge_control.h"
#include "common/crypto.h"

namespace ot::controld {
namespace {

constexpr std::string_view kPrefix = "oc_";
// A label per purpose, so the secret could key other derivations without their outputs meeting.
constexpr std::string_view kLabel = "opentunnel-origin-v1";

std::mutex& secretMutex() {
  static std::mutex mutex;
  return mutex;
}

std::optional<OriginSecret>& secretSlot() {
  static std::optional<OriginSecret> secret;
  return secret;
}

}  // namespace

bool isValidOriginName(std::string_view name) {
  // The attach's rule for origin and profile names (common/bridge_control.cc).
  if (name.empty() || name.size() > bridge::kMaxNameLength) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

std::string deriveOriginCredential(const OriginSecret& secret, std::string_view tunnelId,
                                   std::string_view origin, uint64_t generation) {
  std::string message;
  message.reserve(kLabel.size() + tunnelId.size() + origin.size() + 24);
  message.append(kLabel);
  message.push_back('\0');
  message.append(tunnelId);
  message.push_back('\0');
  message.append(origin);
  message.push_back('\0');
  message.append(std::to_string(generation));
  const crypto::Sha256Digest mac =
      crypto::hmacSha256(std::span<const uint8_t>(secret), crypto::asBytes(message));
  return std::string(kPrefix) + base64::encodeUrl(std::span<const uint8_t>(mac));
}

bool originCredentialMatches(const OriginSecret& secret, std::string_view tunnelId,
                             std::string_view origin, uint64_t generation,
                             std::string_view presented) {
  const std::string expected = deriveOriginCredential(secret, tunnelId, origin, generation);
  // Compared as SHA-256 digests: equal lengths whatever was presented, so the comparison's time
  // says nothing about the credential.
  return crypto::constantTimeEqual(crypto::sha256(expected), crypto::sha256(presented));
}

void installOriginSecret(const OriginSecret& secret) {
  const std::lock_guard lock(secretMutex());
  secretSlot() = secret;
}

std::optional<OriginSecret> installedOriginSecret() {
  const std::lock_guard lock(secretMutex());
  return secretSlot();
}

}  // namespace ot::controld
