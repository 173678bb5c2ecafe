// Hashing, MACs and randomness on OpenSSL 3's EVP API. The SHA-256 and HMAC algorithm objects
// are fetched once per process (first use, thread-safe) and kept for its lifetime, because
// fetching per call costs a provider lookup under a lock. Every function here may be called from
// any thread; a Sha256 object belongs to the thread using it.
//
// Failures inside OpenSSL while hashing can only mean memory exhaustion or a broken install, so
// they abort with a message; randomness can legitimately be unavailable, so it returns nullopt.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct evp_md_ctx_st;

namespace ot::crypto {

inline constexpr size_t kSha256Size = 32;
using Sha256Digest = std::array<uint8_t, kSha256Size>;

// A view of a string's bytes, for calls that mix text and binary arguments.
[[nodiscard]] inline std::span<const uint8_t> asBytes(std::string_view text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

[[nodiscard]] Sha256Digest sha256(std::span<const uint8_t> data);
[[nodiscard]] inline Sha256Digest sha256(std::string_view data) {
  return sha256(asBytes(data));
}

// Incremental SHA-256: update() any number of times, then finish(), which also resets the object
// so it can hash the next message. Move-only.
class Sha256 {
 public:
  Sha256();
  void update(std::span<const uint8_t> data);
  void update(std::string_view data) { update(asBytes(data)); }
  [[nodiscard]] Sha256Digest finish();

 private:
  struct CtxFree {
    void operator()(evp_md_ctx_st* ctx) const;
  };
  std::unique_ptr<evp_md_ctx_st, CtxFree> ctx_;
};

// HMAC-SHA256 (RFC 2104); keys of any length, including empty and longer than the block size.
[[nodiscard]] Sha256Digest hmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> data);
[[nodiscard]] inline Sha256Digest hmacSha256(std::string_view key, std::string_view data) {
  return hmacSha256(asBytes(key), asBytes(data));
}

// Compares in time that depends only on the length (lengths are not secret): use it for MACs,
// token hashes and proofs. Different lengths compare unequal.
[[nodiscard]] bool constantTimeEqual(std::span<const uint8_t> a, std::span<const uint8_t> b);
[[nodiscard]] inline bool constantTimeEqual(std::string_view a, std::string_view b) {
  return constantTimeEqual(asBytes(a), asBytes(b));
}

// `count` bytes from OpenSSL's CSPRNG; std::nullopt when it cannot supply them (no entropy
// source, or count above INT_MAX). Callers must treat that as a failed operation, never fall
// back to weaker randomness.
[[nodiscard]] std::optional<std::vector<uint8_t>> randomBytes(size_t count);

// `count` random bytes as unpadded base64url: 32 bytes give a 43-character token.
[[nodiscard]] std::optional<std::string> randomToken(size_t count);

// Lowercase hex, two characters per byte.
[[nodiscard]] std::string toHex(std::span<const uint8_t> data);
// Accepts either case; std::nullopt on an odd length or a non-hex character.
[[nodiscard]] std::optional<std::vector<uint8_t>> fromHex(std::string_view text);

}  // namespace ot::crypto
