// Test helper: a self-signed certificate for a PEM key, standing in for what a CA returns.
#pragma once

#include <doctest/doctest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <string>
#include <vector>

namespace ot::client::testing {

// `dnsNames` go into a subjectAltName; a negative `validSeconds` makes one that has expired.
inline std::string selfSigned(const std::string& keyPem, long validSeconds = 3600,
                              const std::vector<std::string>& dnsNames = {}) {
  BIO* bio = BIO_new_mem_buf(keyPem.data(), static_cast<int>(keyPem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  REQUIRE(key != nullptr);
  X509* certificate = X509_new();
  X509_set_version(certificate, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(certificate), 1);
  X509_gmtime_adj(X509_getm_notBefore(certificate), 0);
  X509_gmtime_adj(X509_getm_notAfter(certificate), validSeconds);
  X509_set_pubkey(certificate, key);
  if (!dnsNames.empty()) {
    std::string names;
    for (const std::string& name : dnsNames) names += (names.empty() ? "DNS:" : ",DNS:") + name;
    X509_EXTENSION* extension =
        X509V3_EXT_conf_nid(nullptr, nullptr, NID_subject_alt_name, names.c_str());
    REQUIRE(extension != nullptr);
    X509_add_ext(certificate, extension, -1);
    X509_EXTENSION_free(extension);
  }
  X509_sign(certificate, key, EVP_sha256());
  BIO* out = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(out, certificate);
  char* data = nullptr;
  const long size = BIO_get_mem_data(out, &data);
  std::string pem(data, static_cast<size_t>(size));
  BIO_free(out);
  X509_free(certificate);
  EVP_PKEY_free(key);
  return pem;
}

}  // namespace ot::client::testing
