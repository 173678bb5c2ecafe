#include "common/crypto.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "common/base64.h"

namespace ot::crypto {
namespace {

[[noreturn]] void fail(const char* what) {
  const unsigned long code = ERR_get_error();
  char reason[256] = "no OpenSSL error queued";
  if (code != 0) ERR_error_string_n(code, reason, sizeof(reason));
  std::fprintf(stderr, "fatal: OpenSSL %s failed: %s\n", what, reason);
  std::abort();
}

void check(int ok, const char* what) {
  if (ok != 1) fail(what);
}

// Fetched once and never freed: the objects are immutable, reference counted and safe to share
// between threads. Magic statics make the first fetch thread-safe.
const EVP_MD* sha256Md() {
  static EVP_MD* const md = [] {
    EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    if (fetched == nullptr) fail("EVP_MD_fetch(SHA256)");
    return fetched;
  }();
  return md;
}

EVP_MAC* hmacMac() {
  static EVP_MAC* const mac = [] {
    EVP_MAC* fetched = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    if (fetched == nullptr) fail("EVP_MAC_fetch(HMAC)");
    return fetched;
  }();
  return mac;
}

struct MacCtxFree {
  void operator()(EVP_MAC_CTX* ctx) const { EVP_MAC_CTX_free(ctx); }
};

}  // namespace

void Sha256::CtxFree::operator()(evp_md_ctx_st* ctx) const {
  EVP_MD_CTX_free(ctx);
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_) fail("EVP_MD_CTX_new");
  check(EVP_DigestInit_ex2(ctx_.get(), sha256Md(), nullptr), "EVP_DigestInit_ex2");
}

void Sha256::update(std::span<const uint8_t> data) {
  if (data.empty()) return;
  check(EVP_DigestUpdate(ctx_.get(), data.data(), data.size()), "EVP_DigestUpdate");
}

Sha256Digest Sha256::finish() {
  Sha256Digest digest{};
  unsigned int length = 0;
  check(EVP_DigestFinal_ex(ctx_.get(), digest.data(), &length), "EVP_DigestFinal_ex");
  if (length != digest.size()) fail("EVP_DigestFinal_ex length");
  check(EVP_DigestInit_ex2(ctx_.get(), sha256Md(), nullptr), "EVP_DigestInit_ex2");
  return digest;
}

Sha256Digest sha256(std::span<const uint8_t> data) {
  Sha256Digest digest{};
  unsigned int length = 0;
  // EVP_Digest wants a non-null pointer even for an empty message.
  static const uint8_t kEmpty = 0;
  const uint8_t* in = data.empty() ? &kEmpty : data.data();
  check(EVP_Digest(in, data.size(), digest.data(), &length, sha256Md(), nullptr), "EVP_Digest");
  if (length != digest.size()) fail("EVP_Digest length");
  return digest;
}

Sha256Digest hmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> data) {
  const std::unique_ptr<EVP_MAC_CTX, MacCtxFree> ctx(EVP_MAC_CTX_new(hmacMac()));
  if (!ctx) fail("EVP_MAC_CTX_new");
  // OpenSSL only reads the digest name; the parameter type is non-const for historical reasons.
  char digestName[] = "SHA256";
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digestName, 0),
      OSSL_PARAM_construct_end(),
  };
  // A null key means "keep the previous key" to EVP_MAC_init, so an empty key needs a pointer.
  static const uint8_t kEmpty = 0;
  const uint8_t* keyData = key.empty() ? &kEmpty : key.data();
  check(EVP_MAC_init(ctx.get(), keyData, key.size(), params), "EVP_MAC_init");
  if (!data.empty()) check(EVP_MAC_update(ctx.get(), data.data(), data.size()), "EVP_MAC_update");
  Sha256Digest digest{};
  size_t length = 0;
  check(EVP_MAC_final(ctx.get(), digest.data(), &length, digest.size()), "EVP_MAC_final");
  if (length != digest.size()) fail("EVP_MAC_final length");
  return digest;
}

bool constantTimeEqual(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::optional<std::vector<uint8_t>> randomBytes(size_t count) {
  if (count > static_cast<size_t>(INT_MAX)) return std::nullopt;
  std::vector<uint8_t> out(count);
  if (count == 0) return out;
  if (RAND_bytes(out.data(), static_cast<int>(count)) != 1) {
    ERR_clear_error();
    return std::nullopt;
  }
  return out;
}

std::optional<std::string> randomToken(size_t count) {
  auto bytes = randomBytes(count);
  if (!bytes) return std::nullopt;
  return base64::encodeUrl(*bytes);
}

std::string toHex(std::span<const uint8_t> data) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(data.size() * 2);
  for (const uint8_t byte : data) {
    out.push_back(kDigits[byte >> 4]);
    out.push_back(kDigits[byte & 0x0f]);
  }
  return out;
}

std::optional<std::vector<uint8_t>> fromHex(std::string_view text) {
  if (text.size() % 2 != 0) return std::nullopt;
  const auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<uint8_t> out;
  out.reserve(text.size() / 2);
  for (size_t i = 0; i < text.size(); i += 2) {
    const int high = nibble(text[i]);
    const int low = nibble(text[i + 1]);
    if (high < 0 || low < 0) return std::nullopt;
    out.push_back(static_cast<uint8_t>((high << 4) | low));
  }
  return out;
}

}  // namespace ot::crypto
