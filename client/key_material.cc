#include "client/key_material.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "common/openssl_ptr.h"

namespace ot::client {
namespace {

// The last OpenSSL error as text, clearing the queue so it does not leak into later calls.
std::string opensslError(std::string_view what) {
  const unsigned long code = ERR_peek_last_error();
  std::string message(what);
  if (code != 0) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof buffer);
    message += ": ";
    message += buffer;
  }
  ERR_clear_error();
  return message;
}

Error failure(std::string_view what) {
  return Error{ErrorKind::kInternal, opensslError(what)};
}

BioPtr readBio(std::string_view text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string drain(BIO* bio) {
  char* data = nullptr;
  const long length = BIO_get_mem_data(bio, &data);
  return length > 0 ? std::string(data, static_cast<size_t>(length)) : std::string();
}

// Refuses encrypted keys instead of letting OpenSSL prompt on the terminal.
int noPassword(char*, int, int, void*) {
  return -1;
}

EvpPkeyPtr loadKey(std::string_view keyPem) {
  BioPtr bio = readBio(keyPem);
  if (bio == nullptr) return nullptr;
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, noPassword, nullptr));
  if (key == nullptr) ERR_clear_error();
  return key;
}

X509ReqPtr loadCsr(std::string_view csrPem) {
  BioPtr bio = readBio(csrPem);
  if (bio == nullptr) return nullptr;
  X509ReqPtr request(PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr));
  if (request == nullptr) ERR_clear_error();
  return request;
}

std::string asn1Text(const ASN1_STRING* value) {
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(value)),
                     static_cast<size_t>(ASN1_STRING_length(value)));
}

Status addDnsName(GENERAL_NAMES* names, const std::string& name) {
  GENERAL_NAME* entry = GENERAL_NAME_new();
  ASN1_IA5STRING* text = ASN1_IA5STRING_new();
  if (entry == nullptr || text == nullptr ||
      ASN1_STRING_set(text, name.data(), static_cast<int>(name.size())) != 1) {
    GENERAL_NAME_free(entry);
    ASN1_IA5STRING_free(text);
    return failure("cannot build the subjectAltName");
  }
  GENERAL_NAME_set0_value(entry, GEN_DNS, text);
  if (sk_GENERAL_NAME_push(names, entry) == 0) {
    GENERAL_NAME_free(entry);
    return failure("cannot build the subjectAltName");
  }
  return Ok{};
}

}  // namespace

Result<std::string> generatePrivateKeyPem() {
  EvpPkeyPtr key(EVP_EC_gen("P-256"));
  if (key == nullptr) return failure("cannot generate a P-256 key");
  BioPtr bio(BIO_new(BIO_s_mem()));
  // PEM_write_bio_PrivateKey writes PKCS#8 ("BEGIN PRIVATE KEY"), unencrypted.
  if (bio == nullptr ||
      PEM_write_bio_PrivateKey(bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return failure("cannot encode the private key");
  }
  return drain(bio.get());
}

Status checkPrivateKeyPem(std::string_view keyPem) {
  const EvpPkeyPtr key = loadKey(keyPem);
  if (key == nullptr) {
    return Error{ErrorKind::kInvalid, "the private key does not parse (or is encrypted)"};
  }
  char group[64] = {};
  size_t length = 0;
  if (EVP_PKEY_get_base_id(key.get()) != EVP_PKEY_EC ||
      EVP_PKEY_get_group_name(key.get(), group, sizeof group, &length) != 1 ||
      std::string_view(group) != "prime256v1") {
    ERR_clear_error();
    return Error{ErrorKind::kInvalid, "the private key is not an ECDSA P-256 key"};
  }
  return Ok{};
}

Result<std::string> makeCsrPem(std::string_view keyPem, std::string_view hostname, bool wildcard) {
  const EvpPkeyPtr key = loadKey(keyPem);
  if (key == nullptr) {
    return Error{ErrorKind::kInvalid, "the private key does not parse (or is encrypted)"};
  }
  X509ReqPtr request(X509_REQ_new());
  if (request == nullptr || X509_REQ_set_version(request.get(), X509_REQ_VERSION_1) != 1) {
    return failure("cannot build the CSR");
  }
  const std::string host(hostname);
  X509_NAME* subject = X509_REQ_get_subject_name(request.get());
  if (X509_NAME_add_entry_by_NID(subject, NID_commonName, MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(host.c_str()), -1, -1,
                                 0) != 1) {
    return failure("cannot set the CSR's common name");
  }
  GeneralNamesPtr names(GENERAL_NAMES_new());
  if (names == nullptr) return failure("cannot build the subjectAltName");
  if (Status added = addDnsName(names.get(), host); !added.ok()) return added.error();
  if (wildcard) {
    if (Status added = addDnsName(names.get(), "*." + host); !added.ok()) return added.error();
  }
  STACK_OF(X509_EXTENSION)* raw = nullptr;
  if (X509V3_add1_i2d(&raw, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) != 1) {
    return failure("cannot add the subjectAltName");
  }
  const X509ExtensionsPtr extensions(raw);
  if (X509_REQ_add_extensions(request.get(), extensions.get()) != 1 ||
      X509_REQ_set_pubkey(request.get(), key.get()) != 1) {
    return failure("cannot build the CSR");
  }
  if (X509_REQ_sign(request.get(), key.get(), EVP_sha256()) <= 0) {
    return failure("cannot sign the CSR");
  }
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || PEM_write_bio_X509_REQ(bio.get(), request.get()) != 1) {
    return failure("cannot encode the CSR");
  }
  return drain(bio.get());
}

Result<CsrSummary> readCsr(std::string_view csrPem) {
  const X509ReqPtr request = loadCsr(csrPem);
  if (request == nullptr) return Error{ErrorKind::kInvalid, "the CSR does not parse"};
  CsrSummary summary;
  const X509_NAME* subject = X509_REQ_get_subject_name(request.get());
  const int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (index >= 0) {
    summary.commonName = asn1Text(X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index)));
  }
  STACK_OF(X509_EXTENSION)* raw = X509_REQ_get_extensions(request.get());
  const X509ExtensionsPtr extensions(raw);
  if (extensions != nullptr) {
    const GeneralNamesPtr names(static_cast<GENERAL_NAMES*>(
        X509V3_get_d2i(extensions.get(), NID_subject_alt_name, nullptr, nullptr)));
    for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names.get()); ++i) {
      const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
      if (name->type == GEN_DNS) summary.dnsNames.push_back(asn1Text(name->d.dNSName));
    }
  }
  EVP_PKEY* key = X509_REQ_get0_pubkey(request.get());
  summary.signatureValid = key != nullptr && X509_REQ_verify(request.get(), key) == 1;
  ERR_clear_error();
  return summary;
}

bool csrMatchesKey(std::string_view csrPem, std::string_view keyPem) {
  const X509ReqPtr request = loadCsr(csrPem);
  const EvpPkeyPtr key = loadKey(keyPem);
  if (request == nullptr || key == nullptr) return false;
  EVP_PKEY* publicKey = X509_REQ_get0_pubkey(request.get());
  const bool same = publicKey != nullptr && EVP_PKEY_eq(publicKey, key.get()) == 1;
  ERR_clear_error();
  return same;
}

bool certificateServes(std::string_view chainPem, std::string_view hostname, bool wildcard) {
  BioPtr bio = readBio(chainPem);
  if (bio == nullptr || hostname.empty()) return false;
  const X509Ptr leaf(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (leaf == nullptr) {
    ERR_clear_error();
    return false;
  }
  const std::string name(hostname);
  const std::string below = "route." + name;  // any name under it: only *.<hostname> covers it
  const bool serves =
      X509_cmp_current_time(X509_get0_notAfter(leaf.get())) > 0 &&
      X509_check_host(leaf.get(), name.data(), name.size(), 0, nullptr) == 1 &&
      (!wildcard || X509_check_host(leaf.get(), below.data(), below.size(), 0, nullptr) == 1);
  ERR_clear_error();
  return serves;
}

bool certificateMatchesKey(std::string_view chainPem, std::string_view keyPem) {
  BioPtr bio = readBio(chainPem);
  if (bio == nullptr) return false;
  const X509Ptr leaf(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  const EvpPkeyPtr key = loadKey(keyPem);
  const bool same =
      leaf != nullptr && key != nullptr && X509_check_private_key(leaf.get(), key.get()) == 1;
  ERR_clear_error();
  return same;
}

}  // namespace ot::client
