// Small OpenSSL helpers shared by the CSR checks, the API domain's key and the local CA: DER/PEM
// conversions and error text (the owning pointers are common/openssl_ptr.h). Every function clears
// the calling thread's OpenSSL error queue when it fails, so a later unrelated call never sees a
// stale error. Thread-safe (no shared state).
#pragma once

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/openssl_ptr.h"
#include "common/result.h"

namespace ot::controld {

// The reason of the oldest queued OpenSSL error ("unknown" when the queue is empty); clears the
// queue.
[[nodiscard]] std::string takeOpensslError();

// Decodes `der` with `d2i` and succeeds only when the object used every byte: trailing data
// inside a certificate request or extension is refused, not ignored.
template <typename Ptr, typename T>
[[nodiscard]] Ptr decodeWhole(T* (*d2i)(T**, const unsigned char**, long),
                              std::span<const uint8_t> der) {
  const unsigned char* cursor = der.data();
  Ptr object(d2i(nullptr, &cursor, static_cast<long>(der.size())));
  if (object != nullptr && cursor != der.data() + der.size()) object.reset();
  if (object == nullptr) ERR_clear_error();
  return object;
}

[[nodiscard]] inline std::span<const uint8_t> bytesOf(const ASN1_STRING* string) {
  return {ASN1_STRING_get0_data(string), static_cast<size_t>(ASN1_STRING_length(string))};
}

// Everything written to a memory BIO so far.
[[nodiscard]] std::string readAll(BIO* bio);

[[nodiscard]] Result<std::string> certificatePem(X509* certificate);
[[nodiscard]] Result<std::string> requestPem(X509_REQ* request);
[[nodiscard]] Result<std::string> privateKeyPem(EVP_PKEY* key);  // unencrypted PKCS#8

// A subjectAltName value listing each name as a dNSName, in order.
[[nodiscard]] Result<GeneralNamesPtr> dnsGeneralNames(const std::vector<std::string>& names);

// A fresh ECDSA key on the named curve ("P-256", "P-384").
[[nodiscard]] Result<EvpPkeyPtr> generateEcKey(const char* curve);

}  // namespace ot::controld
