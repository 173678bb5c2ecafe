// Small OpenSSL helpers shared by the CSR checks, the API domain's key and the local CA: owning
// pointers that free each object with its matching function, DER/PEM conversions, and error
// text. Every function clears the calling thread's OpenSSL error queue when it fails, so a later
// unrelated call never sees a stale error. Thread-safe (no shared state).
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

#include "common/result.h"

namespace ot::controld {

template <auto Free>
struct OpensslFree {
  template <typename T>
  void operator()(T* object) const {
    Free(object);
  }
};

using BioPtr = std::unique_ptr<BIO, OpensslFree<BIO_free_all>>;
using BignumPtr = std::unique_ptr<BIGNUM, OpensslFree<BN_free>>;
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, OpensslFree<EVP_PKEY_free>>;
using EvpPkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, OpensslFree<EVP_PKEY_CTX_free>>;
using X509Ptr = std::unique_ptr<X509, OpensslFree<X509_free>>;
using X509ReqPtr = std::unique_ptr<X509_REQ, OpensslFree<X509_REQ_free>>;
using X509NamePtr = std::unique_ptr<X509_NAME, OpensslFree<X509_NAME_free>>;
using X509ExtensionPtr = std::unique_ptr<X509_EXTENSION, OpensslFree<X509_EXTENSION_free>>;
inline void freeExtensions(X509_EXTENSIONS* extensions) {
  sk_X509_EXTENSION_pop_free(extensions, X509_EXTENSION_free);
}
using X509ExtensionsPtr = std::unique_ptr<X509_EXTENSIONS, OpensslFree<freeExtensions>>;
using GeneralNamesPtr = std::unique_ptr<GENERAL_NAMES, OpensslFree<GENERAL_NAMES_free>>;
using BasicConstraintsPtr = std::unique_ptr<BASIC_CONSTRAINTS, OpensslFree<BASIC_CONSTRAINTS_free>>;
using BitStringPtr = std::unique_ptr<ASN1_BIT_STRING, OpensslFree<ASN1_BIT_STRING_free>>;
using OctetStringPtr = std::unique_ptr<ASN1_OCTET_STRING, OpensslFree<ASN1_OCTET_STRING_free>>;
using IntegerPtr = std::unique_ptr<ASN1_INTEGER, OpensslFree<ASN1_INTEGER_free>>;
using ExtendedKeyUsagePtr =
    std::unique_ptr<EXTENDED_KEY_USAGE, OpensslFree<EXTENDED_KEY_USAGE_free>>;
using AuthorityKeyIdPtr = std::unique_ptr<AUTHORITY_KEYID, OpensslFree<AUTHORITY_KEYID_free>>;

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
