// TLS 1.3 key schedule pieces a record layer needs after the handshake (RFC 8446 section 7):
// HKDF-Expand-Label, the write key and IV of a traffic secret, and the KeyUpdate step of a
// traffic secret ("traffic upd"). SHA-256 and SHA-384 only (the three suites below). Pure: no
// I/O, no SSL objects; HKDF-Expand as HMAC (EVP_MAC) on a context kept per thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace ot::tls13 {

// The TLS 1.3 cipher suites the detached record layer runs.
enum class Suite : uint8_t {
  kAes128GcmSha256,         // 0x1301
  kAes256GcmSha384,         // 0x1302
  kChacha20Poly1305Sha256,  // 0x1303
};

// The suite for a TLS 1.3 cipher suite number (SSL_CIPHER_get_protocol_id), none for the rest.
[[nodiscard]] std::optional<Suite> suiteFromId(uint16_t id);
[[nodiscard]] size_t hashSize(Suite suite);  // 32 or 48: the traffic secret's size
[[nodiscard]] size_t keySize(Suite suite);   // 16 or 32

constexpr size_t kMaxSecretSize = 48;
constexpr size_t kMaxKeySize = 32;
constexpr size_t kIvSize = 12;

// HKDF-Expand-Label(secret, label, context, out.size()) with the suite's hash (RFC 8446 7.1;
// `label` without the "tls13 " prefix). False when OpenSSL fails (out is then zeroed).
[[nodiscard]] bool hkdfExpandLabel(Suite suite, std::span<const uint8_t> secret,
                                   std::string_view label, std::span<const uint8_t> context,
                                   std::span<uint8_t> out);

// One direction's traffic state: the secret and the key and IV derived from it.
struct TrafficKeys {
  std::array<uint8_t, kMaxSecretSize> secret{};
  std::array<uint8_t, kMaxKeySize> key{};
  std::array<uint8_t, kIvSize> iv{};

  void cleanse();
};

// keys.secret = `secret` (hashSize(suite) bytes), key = Expand-Label(secret, "key"), iv =
// Expand-Label(secret, "iv"). False when `secret` has the wrong size or OpenSSL fails.
[[nodiscard]] bool deriveTrafficKeys(Suite suite, std::span<const uint8_t> secret,
                                     TrafficKeys& keys);

// The KeyUpdate step (RFC 8446 7.2): secret_N+1 = Expand-Label(secret_N, "traffic upd", "",
// Hash.length), then its key and IV.
[[nodiscard]] bool updateTrafficKeys(Suite suite, TrafficKeys& keys);

}  // namespace ot::tls13
