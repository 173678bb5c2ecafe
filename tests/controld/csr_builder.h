// Certificate requests for the CSR and local CA tests, hostile ones included: any subject, any
// subjectAltName entries (DNS, IP, email, URI), extra extensions and attributes, several key
// types, any digest, and a signature broken after signing. Built with OpenSSL's own API so the
// checks are tested against real encodings. Keys are made once per kind and kept for the whole
// test process, because RSA key generation is slow under the sanitizers.
#pragma once

#include <doctest/doctest.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/base64.h"
#include "controld/base/openssl_util.h"

namespace ot::controld::testing {

enum class TestKey {
  kP256,
  kP384,
  kP521,
  kP256Explicit,
  kRsa1024,
  kRsa2048,
  kRsa4096,
  kRsa4104,
  kEd25519
};

inline EvpPkeyPtr generateTestKey(TestKey kind) {
  EVP_PKEY* key = nullptr;
  const auto generate = [&](const char* type, auto&& configure) {
    EvpPkeyCtxPtr context(EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr));
    REQUIRE(context != nullptr);
    REQUIRE(EVP_PKEY_keygen_init(context.get()) == 1);
    configure(context.get());
    REQUIRE(EVP_PKEY_generate(context.get(), &key) == 1);
  };
  const auto curve = [](const char* name) {
    return
        [name](EVP_PKEY_CTX* context) { REQUIRE(EVP_PKEY_CTX_set_group_name(context, name) == 1); };
  };
  const auto rsa = [](int bits) {
    return [bits](EVP_PKEY_CTX* context) {
      REQUIRE(EVP_PKEY_CTX_set_rsa_keygen_bits(context, bits) == 1);
    };
  };
  switch (kind) {
    case TestKey::kP256:
      generate("EC", curve("P-256"));
      break;
    case TestKey::kP384:
      generate("EC", curve("P-384"));
      break;
    case TestKey::kP521:
      generate("EC", curve("P-521"));
      break;
    case TestKey::kP256Explicit:
      // A P-256 key whose public key is written with the curve's parameters spelled out.
      generate("EC", curve("P-256"));
      REQUIRE(EVP_PKEY_set_utf8_string_param(key, OSSL_PKEY_PARAM_EC_ENCODING,
                                             OSSL_PKEY_EC_ENCODING_EXPLICIT) == 1);
      break;
    case TestKey::kRsa1024:
      generate("RSA", rsa(1024));
      break;
    case TestKey::kRsa2048:
      generate("RSA", rsa(2048));
      break;
    case TestKey::kRsa4096:
      generate("RSA", rsa(4096));
      break;
    case TestKey::kRsa4104:
      generate("RSA", rsa(4104));
      break;
    case TestKey::kEd25519:
      generate("ED25519", [](EVP_PKEY_CTX*) {});
      break;
  }
  return EvpPkeyPtr(key);
}

// The process-wide key of this kind (owned by the cache).
inline EVP_PKEY* testKey(TestKey kind) {
  static std::mutex mutex;
  static std::map<TestKey, EvpPkeyPtr> keys;
  const std::lock_guard lock(mutex);
  EvpPkeyPtr& key = keys[kind];
  if (key == nullptr) key = generateTestKey(kind);
  return key.get();
}

struct CsrSpec {
  TestKey key = TestKey::kP256;
  std::vector<std::pair<std::string, std::string>> subject;  // e.g. {"CN", "abc.tunnel.test"}
  bool addSan = true;
  std::vector<std::string> dns;
  std::vector<std::string> ips;
  std::vector<std::string> emails;
  std::vector<std::string> uris;
  bool sanTwice = false;
  // Extra extensions as `openssl req` config would name them, e.g. {"keyUsage", "keyCertSign"}.
  std::vector<std::pair<std::string, std::string>> extensions;
  bool challengePassword = false;
  const EVP_MD* digest = nullptr;  // null: SHA-256 (Ed25519 always signs without one)
  bool corruptSignature = false;   // flip a bit in the last byte of the DER (the signature)
};

// CN=host, subjectAltName host and, if asked, *.host.
inline CsrSpec hostCsr(const std::string& host, bool wildcard = false) {
  CsrSpec spec;
  spec.subject = {{"CN", host}};
  spec.dns = {host};
  if (wildcard) spec.dns.push_back("*." + host);
  return spec;
}

inline void addGeneralName(GENERAL_NAMES* names, int type, std::string_view value) {
  GENERAL_NAME* name = GENERAL_NAME_new();
  REQUIRE(name != nullptr);
  if (type == GEN_IPADD) {
    ASN1_OCTET_STRING* address = a2i_IPADDRESS(std::string(value).c_str());
    REQUIRE(address != nullptr);
    GENERAL_NAME_set0_value(name, type, address);
  } else {
    ASN1_IA5STRING* text = ASN1_IA5STRING_new();
    REQUIRE(text != nullptr);
    REQUIRE(ASN1_STRING_set(text, value.data(), static_cast<int>(value.size())) == 1);
    GENERAL_NAME_set0_value(name, type, text);
  }
  REQUIRE(sk_GENERAL_NAME_push(names, name) > 0);
}

inline std::vector<uint8_t> buildCsrDer(const CsrSpec& spec) {
  EVP_PKEY* key = testKey(spec.key);
  X509ReqPtr request(X509_REQ_new());
  REQUIRE(request != nullptr);
  REQUIRE(X509_REQ_set_version(request.get(), X509_REQ_VERSION_1) == 1);
  REQUIRE(X509_REQ_set_pubkey(request.get(), key) == 1);
  X509_NAME* subject = X509_REQ_get_subject_name(request.get());
  for (const auto& [field, value] : spec.subject) {
    REQUIRE(X509_NAME_add_entry_by_txt(subject, field.c_str(), MBSTRING_UTF8,
                                       reinterpret_cast<const unsigned char*>(value.data()),
                                       static_cast<int>(value.size()), -1, 0) == 1);
  }

  X509_EXTENSIONS* extensions = sk_X509_EXTENSION_new_null();
  REQUIRE(extensions != nullptr);
  const X509ExtensionsPtr extensionsOwner(extensions);
  if (spec.addSan) {
    const GeneralNamesPtr names(sk_GENERAL_NAME_new_null());
    for (const std::string& name : spec.dns) addGeneralName(names.get(), GEN_DNS, name);
    for (const std::string& ip : spec.ips) addGeneralName(names.get(), GEN_IPADD, ip);
    for (const std::string& email : spec.emails) addGeneralName(names.get(), GEN_EMAIL, email);
    for (const std::string& uri : spec.uris) addGeneralName(names.get(), GEN_URI, uri);
    for (int copy = 0; copy < (spec.sanTwice ? 2 : 1); ++copy) {
      REQUIRE(X509V3_add1_i2d(&extensions, NID_subject_alt_name, names.get(), 0,
                              X509V3_ADD_APPEND) == 1);
    }
  }
  X509V3_CTX context{};
  X509V3_set_ctx(&context, nullptr, nullptr, request.get(), nullptr, 0);
  for (const auto& requested : spec.extensions) {
    const std::string& name = requested.first;
    const std::string& value = requested.second;
    X509_EXTENSION* extension = X509V3_EXT_nconf(nullptr, &context, name.c_str(), value.c_str());
    INFO("extension " << name << " = " << value);
    REQUIRE(extension != nullptr);
    REQUIRE(sk_X509_EXTENSION_push(extensions, extension) > 0);
  }
  if (sk_X509_EXTENSION_num(extensions) > 0) {
    REQUIRE(X509_REQ_add_extensions(request.get(), extensions) == 1);
  }
  if (spec.challengePassword) {
    REQUIRE(X509_REQ_add1_attr_by_NID(request.get(), NID_pkcs9_challengePassword, MBSTRING_ASC,
                                      reinterpret_cast<const unsigned char*>("secret"), -1) == 1);
  }

  const EVP_MD* digest = spec.key == TestKey::kEd25519 ? nullptr
                         : spec.digest != nullptr      ? spec.digest
                                                       : EVP_sha256();
  REQUIRE(X509_REQ_sign(request.get(), key, digest) > 0);
  const int length = i2d_X509_REQ(request.get(), nullptr);
  REQUIRE(length > 0);
  std::vector<uint8_t> der(static_cast<size_t>(length));
  unsigned char* cursor = der.data();
  REQUIRE(i2d_X509_REQ(request.get(), &cursor) == length);
  if (spec.corruptSignature) der.back() ^= 0x01;
  return der;
}

inline std::string pemOf(const std::vector<uint8_t>& der,
                         std::string_view label = "CERTIFICATE REQUEST", size_t lineLength = 64,
                         std::string_view newline = "\n") {
  const std::string body = base64::encode(der);
  std::string pem = "-----BEGIN " + std::string(label) + "-----" + std::string(newline);
  for (size_t i = 0; i < body.size(); i += lineLength) {
    pem += body.substr(i, lineLength) + std::string(newline);
  }
  pem += "-----END " + std::string(label) + "-----" + std::string(newline);
  return pem;
}

inline std::string buildCsrPem(const CsrSpec& spec) {
  return pemOf(buildCsrDer(spec));
}

}  // namespace ot::controld::testing
