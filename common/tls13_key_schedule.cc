#include "common/tls13_key_schedule.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include <cstring>

namespace ot::tls13 {
namespace {

// Fetched once per process (OpenSSL's fetch is a locked lookup); never freed.
EVP_KDF* hkdf() {
  static EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  return kdf;
}

const char* digestName(Suite suite) {
  return suite == Suite::kAes256GcmSha384 ? "SHA384" : "SHA256";
}

// One HKDF context per thread and digest, in expand-only mode with its digest set once: a call
// then only sets the key and the info (making a context and fetching its digest per call cost
// ~2.5 us of the ~3 us an expand took).
struct ThreadKdf {
  EVP_KDF_CTX* ctx[2] = {nullptr, nullptr};
  ThreadKdf() = default;
  ThreadKdf(const ThreadKdf&) = delete;
  ThreadKdf& operator=(const ThreadKdf&) = delete;
  ~ThreadKdf() {
    EVP_KDF_CTX_free(ctx[0]);
    EVP_KDF_CTX_free(ctx[1]);
  }
};
thread_local ThreadKdf tKdf;

EVP_KDF_CTX* kdfFor(Suite suite) {
  const size_t index = suite == Suite::kAes256GcmSha384 ? 1 : 0;
  EVP_KDF_CTX*& ctx = tKdf.ctx[index];
  if (ctx != nullptr) return ctx;
  if (hkdf() == nullptr) return nullptr;
  ctx = EVP_KDF_CTX_new(hkdf());
  if (ctx == nullptr) return nullptr;
  int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, const_cast<char*>(digestName(suite)),
                                       0),
      OSSL_PARAM_construct_end(),
  };
  if (EVP_KDF_CTX_set_params(ctx, params) != 1) {
    EVP_KDF_CTX_free(ctx);
    ctx = nullptr;
  }
  return ctx;
}

}  // namespace

std::optional<Suite> suiteFromId(uint16_t id) {
  switch (id) {
    case 0x1301:
      return Suite::kAes128GcmSha256;
    case 0x1302:
      return Suite::kAes256GcmSha384;
    case 0x1303:
      return Suite::kChacha20Poly1305Sha256;
    default:
      return std::nullopt;
  }
}

size_t hashSize(Suite suite) {
  return suite == Suite::kAes256GcmSha384 ? 48 : 32;
}

size_t keySize(Suite suite) {
  return suite == Suite::kAes128GcmSha256 ? 16 : 32;
}

bool hkdfExpandLabel(Suite suite, std::span<const uint8_t> secret, std::string_view label,
                     std::span<const uint8_t> context, std::span<uint8_t> out) {
  // struct { uint16 length; opaque label<7..255> = "tls13 " + label; opaque context<0..255>; }
  constexpr std::string_view kPrefix = "tls13 ";
  std::array<uint8_t, 2 + 1 + 255 + 1 + 255> info{};
  const size_t labelSize = kPrefix.size() + label.size();
  if (labelSize > 255 || context.size() > 255 || out.size() > 0xffff || secret.empty()) {
    std::memset(out.data(), 0, out.size());
    return false;
  }
  size_t n = 0;
  info[n++] = static_cast<uint8_t>(out.size() >> 8);
  info[n++] = static_cast<uint8_t>(out.size());
  info[n++] = static_cast<uint8_t>(labelSize);
  std::memcpy(info.data() + n, kPrefix.data(), kPrefix.size());
  n += kPrefix.size();
  std::memcpy(info.data() + n, label.data(), label.size());
  n += label.size();
  info[n++] = static_cast<uint8_t>(context.size());
  if (!context.empty()) std::memcpy(info.data() + n, context.data(), context.size());
  n += context.size();

  EVP_KDF_CTX* kctx = kdfFor(suite);
  if (kctx == nullptr) {
    std::memset(out.data(), 0, out.size());
    return false;
  }
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(secret.data()),
                                        secret.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info.data(), n),
      OSSL_PARAM_construct_end(),
  };
  const bool ok = EVP_KDF_derive(kctx, out.data(), out.size(), params) == 1;
  // The context keeps a copy of the key until the next call: replace it (the old one is cleansed
  // as it is freed), so no secret stays in the thread's context.
  uint8_t blank = 0;
  const OSSL_PARAM wipe[] = {
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, &blank, 1),
      OSSL_PARAM_construct_end(),
  };
  (void)EVP_KDF_CTX_set_params(kctx, wipe);
  OPENSSL_cleanse(info.data(), info.size());
  if (!ok) std::memset(out.data(), 0, out.size());
  return ok;
}

void TrafficKeys::cleanse() {
  OPENSSL_cleanse(secret.data(), secret.size());
  OPENSSL_cleanse(key.data(), key.size());
  OPENSSL_cleanse(iv.data(), iv.size());
}

bool deriveTrafficKeys(Suite suite, std::span<const uint8_t> secret, TrafficKeys& keys) {
  const size_t size = hashSize(suite);
  if (secret.size() != size) return false;
  std::array<uint8_t, kMaxSecretSize> copy{};  // `secret` may be keys.secret itself
  std::memcpy(copy.data(), secret.data(), size);
  keys.cleanse();
  std::memcpy(keys.secret.data(), copy.data(), size);
  OPENSSL_cleanse(copy.data(), copy.size());
  const std::span<const uint8_t> s(keys.secret.data(), size);
  return hkdfExpandLabel(suite, s, "key", {}, std::span(keys.key.data(), keySize(suite))) &&
         hkdfExpandLabel(suite, s, "iv", {}, keys.iv);
}

bool updateTrafficKeys(Suite suite, TrafficKeys& keys) {
  const size_t size = hashSize(suite);
  std::array<uint8_t, kMaxSecretSize> next{};
  const bool ok = hkdfExpandLabel(suite, std::span(keys.secret.data(), size), "traffic upd", {},
                                  std::span(next.data(), size)) &&
                  deriveTrafficKeys(suite, std::span(next.data(), size), keys);
  OPENSSL_cleanse(next.data(), next.size());
  return ok;
}

}  // namespace ot::tls13
