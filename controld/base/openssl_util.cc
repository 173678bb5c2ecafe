#include "controld/base/openssl_util.h"

#include <openssl/err.h>
#include <openssl/pem.h>

#include <array>

namespace ot::controld {
namespace {

Error internal(std::string what) {
  return Error{ErrorKind::kInternal, std::move(what) + ": " + takeOpensslError()};
}

BioPtr memoryBio() {
  return BioPtr(BIO_new(BIO_s_mem()));
}

}  // namespace

std::string takeOpensslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "unknown";
  std::array<char, 256> text{};
  ERR_error_string_n(code, text.data(), text.size());
  return text.data();
}

std::string readAll(BIO* bio) {
  std::string out;
  std::array<char, 4096> chunk{};
  for (;;) {
    const int n = BIO_read(bio, chunk.data(), static_cast<int>(chunk.size()));
    if (n <= 0) break;
    out.append(chunk.data(), static_cast<size_t>(n));
  }
  ERR_clear_error();  // an empty memory BIO reports "retry", not an error worth keeping
  return out;
}

Result<std::string> certificatePem(X509* certificate) {
  BioPtr bio = memoryBio();
  if (bio == nullptr || PEM_write_bio_X509(bio.get(), certificate) != 1) {
    return internal("cannot encode the certificate as PEM");
  }
  return readAll(bio.get());
}

Result<std::string> requestPem(X509_REQ* request) {
  BioPtr bio = memoryBio();
  if (bio == nullptr || PEM_write_bio_X509_REQ(bio.get(), request) != 1) {
    return internal("cannot encode the certificate request as PEM");
  }
  return readAll(bio.get());
}

Result<std::string> privateKeyPem(EVP_PKEY* key) {
  BioPtr bio = memoryBio();
  if (bio == nullptr ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return internal("cannot encode the private key as PEM");
  }
  return readAll(bio.get());
}

Result<GeneralNamesPtr> dnsGeneralNames(const std::vector<std::string>& names) {
  GeneralNamesPtr list(sk_GENERAL_NAME_new_null());
  if (list == nullptr) return internal("cannot allocate subjectAltName");
  for (const std::string& name : names) {
    ASN1_IA5STRING* text = ASN1_IA5STRING_new();
    if (text == nullptr || ASN1_STRING_set(text, name.data(), static_cast<int>(name.size())) != 1) {
      ASN1_IA5STRING_free(text);
      return internal("cannot allocate a subjectAltName entry");
    }
    GENERAL_NAME* entry = GENERAL_NAME_new();
    if (entry == nullptr) {
      ASN1_IA5STRING_free(text);
      return internal("cannot allocate a subjectAltName entry");
    }
    GENERAL_NAME_set0_value(entry, GEN_DNS, text);  // entry owns text from here
    if (sk_GENERAL_NAME_push(list.get(), entry) <= 0) {
      GENERAL_NAME_free(entry);
      return internal("cannot allocate a subjectAltName entry");
    }
  }
  return list;
}

Result<EvpPkeyPtr> generateEcKey(const char* curve) {
  EvpPkeyCtxPtr context(EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr));
  if (context == nullptr || EVP_PKEY_keygen_init(context.get()) != 1 ||
      EVP_PKEY_CTX_set_group_name(context.get(), curve) != 1) {
    return internal(std::string("cannot set up ") + curve + " key generation");
  }
  EVP_PKEY* key = nullptr;
  if (EVP_PKEY_generate(context.get(), &key) != 1) {
    return internal(std::string("cannot generate a ") + curve + " key");
  }
  return EvpPkeyPtr(key);
}

}  // namespace ot::controld
