// Owning pointers for OpenSSL objects, each freed with its matching function. Shared by the TLS
// engine, otunnel's key material and controld's certificate code (controld/base/openssl_util.h).
#pragma once

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

namespace ot {

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

}  // namespace ot
