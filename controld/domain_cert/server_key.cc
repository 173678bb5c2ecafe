#include "controld/domain_cert/server_key.h"

#include <openssl/pem.h>

#include <algorithm>

#include "controld/base/openssl_util.h"
#include "controld/issuance/csr_check.h"

namespace ot::controld {
namespace {

constexpr size_t kMaxKeyPemSize = 64 * 1024;

// Stored keys are never encrypted; without this OpenSSL would prompt on the terminal for one.
int noPassphrase(char* /*buffer*/, int /*size*/, int /*writing*/, void* /*data*/) {
  return 0;
}

Error internal(std::string what) {
  return Error{ErrorKind::kInternal, std::move(what) + ": " + takeOpensslError()};
}

Result<std::string> signedRequest(const std::vector<std::string>& names, EVP_PKEY* key) {
  X509ReqPtr request(X509_REQ_new());
  if (request == nullptr || X509_REQ_set_version(request.get(), X509_REQ_VERSION_1) != 1 ||
      X509_REQ_set_pubkey(request.get(), key) != 1) {
    return internal("cannot start a certificate request");
  }
  const std::string& cn = names.front();
  if (X509_NAME_add_entry_by_NID(X509_REQ_get_subject_name(request.get()), NID_commonName,
                                 MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(cn.data()),
                                 static_cast<int>(cn.size()), -1, 0) != 1) {
    return internal("cannot set the request's subject");
  }
  Result<GeneralNamesPtr> san = dnsGeneralNames(names);
  if (!san.ok()) return san.error();
  X509_EXTENSIONS* rawExtensions = nullptr;
  if (X509V3_add1_i2d(&rawExtensions, NID_subject_alt_name, san->get(), 0, X509V3_ADD_DEFAULT) !=
      1) {
    return internal("cannot encode subjectAltName");
  }
  const X509ExtensionsPtr extensions(rawExtensions);
  if (X509_REQ_add_extensions(request.get(), extensions.get()) != 1) {
    return internal("cannot add the requested extensions");
  }
  if (X509_REQ_sign(request.get(), key, EVP_sha256()) <= 0) {
    return internal("cannot sign the certificate request");
  }
  return requestPem(request.get());
}

}  // namespace

Result<ServerKeyAndCsr> makeServerKeyAndCsr(std::string_view domain) {
  std::string name(domain);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; });

  Result<EvpPkeyPtr> key = generateEcKey("P-256");
  if (!key.ok()) return key.error();
  Result<std::string> keyPem = privateKeyPem(key->get());
  if (!keyPem.ok()) return keyPem.error();
  Result<std::string> csrPem = signedRequest({name}, key->get());
  if (!csrPem.ok()) return csrPem.error();
  // The same check the issuer will apply; it also refuses a domain that is not a hostname.
  if (Result<CsrInfo> checked = checkServerCsr(*csrPem, name); !checked.ok()) {
    return checked.error();
  }
  return ServerKeyAndCsr{std::move(keyPem).value(), std::move(csrPem).value()};
}

Result<std::string> makeCsr(const std::vector<std::string>& names, std::string_view keyPem) {
  if (names.empty()) return Error{ErrorKind::kInvalid, "a CSR needs at least one name"};
  if (keyPem.size() > kMaxKeyPemSize)
    return Error{ErrorKind::kInvalid, "the private key is too large"};
  BioPtr bio(BIO_new_mem_buf(keyPem.data(), static_cast<int>(keyPem.size())));
  EvpPkeyPtr key(bio == nullptr
                     ? nullptr
                     : PEM_read_bio_PrivateKey(bio.get(), nullptr, noPassphrase, nullptr));
  if (key == nullptr) {
    return Error{ErrorKind::kInvalid, "the private key does not parse: " + takeOpensslError()};
  }
  return signedRequest(names, key.get());
}

}  // namespace ot::controld
