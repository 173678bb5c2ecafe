#include "controld/domain_cert/certificate_pem.h"

#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <cstdint>
#include <ctime>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "controld/base/openssl_util.h"

namespace ot::controld {
namespace {

Error invalid(std::string message) {
  return Error{ErrorKind::kInvalid, std::move(message)};
}

Result<int64_t> asn1TimeMs(const ASN1_TIME* time) {
  std::tm parts{};
  if (time == nullptr || ASN1_TIME_to_tm(time, &parts) != 1) {
    ERR_clear_error();
    return invalid("the certificate has an unreadable validity time");
  }
  const int64_t seconds = timegm(&parts);
  return seconds * 1000;
}

// Every PEM block of the text, which must all be certificates.
Result<std::vector<X509Ptr>> parseChain(std::string_view chainPem) {
  BioPtr bio(BIO_new_mem_buf(chainPem.data(), static_cast<int>(chainPem.size())));
  if (bio == nullptr) return Error{ErrorKind::kInternal, takeOpensslError()};
  std::vector<X509Ptr> chain;
  while (true) {
    char* name = nullptr;
    char* header = nullptr;
    unsigned char* data = nullptr;
    long length = 0;
    if (PEM_read_bio(bio.get(), &name, &header, &data, &length) != 1) {
      // No further BEGIN line is the end of the text; anything else is a broken block.
      const unsigned long error = ERR_peek_last_error();
      const bool end =
          ERR_GET_LIB(error) == ERR_LIB_PEM && ERR_GET_REASON(error) == PEM_R_NO_START_LINE;
      ERR_clear_error();
      if (!end) return invalid("the chain holds a broken PEM block");
      break;
    }
    const std::string label = name;
    const bool hasHeaders = header != nullptr && *header != '\0';
    X509Ptr certificate;
    if (label == "CERTIFICATE" && !hasHeaders && length > 0) {
      certificate = decodeWhole<X509Ptr>(
          d2i_X509, std::span<const uint8_t>(data, static_cast<size_t>(length)));
    }
    OPENSSL_free(name);
    OPENSSL_free(header);
    OPENSSL_free(data);
    if (label != "CERTIFICATE") return invalid("the chain holds a " + label + " block");
    if (certificate == nullptr) return invalid("the chain holds an unreadable certificate");
    chain.push_back(std::move(certificate));
  }
  if (chain.empty()) return invalid("no certificate in the chain");
  return chain;
}

// Refuses encrypted keys instead of letting OpenSSL prompt on the terminal.
int noPassword(char* /*buffer*/, int /*size*/, int /*rwflag*/, void* /*data*/) {
  return -1;
}

}  // namespace

Result<CertificateValidity> leafValidity(std::string_view chainPem) {
  auto chain = parseChain(chainPem);
  if (!chain) return chain.error();
  X509* leaf = chain->front().get();
  auto notBefore = asn1TimeMs(X509_get0_notBefore(leaf));
  if (!notBefore) return notBefore.error();
  auto notAfter = asn1TimeMs(X509_get0_notAfter(leaf));
  if (!notAfter) return notAfter.error();
  return CertificateValidity{*notBefore, *notAfter};
}

Result<ApiCertificatePem> checkApiCertificate(std::string_view chainPem, std::string_view keyPem) {
  auto chain = parseChain(chainPem);
  if (!chain) return chain.error();
  BioPtr bio(BIO_new_mem_buf(keyPem.data(), static_cast<int>(keyPem.size())));
  if (bio == nullptr) return Error{ErrorKind::kInternal, takeOpensslError()};
  const EvpPkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, noPassword, nullptr));
  if (key == nullptr) {
    return invalid("the private key does not parse (or is encrypted): " + takeOpensslError());
  }
  X509* leaf = chain->front().get();
  if (X509_check_private_key(leaf, key.get()) != 1) {
    ERR_clear_error();
    return invalid("the private key does not belong to the certificate");
  }
  auto notAfter = asn1TimeMs(X509_get0_notAfter(leaf));
  if (!notAfter) return notAfter.error();
  return ApiCertificatePem{std::string(chainPem), std::string(keyPem), *notAfter};
}

bool leafCoversHost(std::string_view chainPem, const std::string& host) {
  auto chain = parseChain(chainPem);
  if (!chain) return false;
  const bool covered =
      X509_check_host(chain->front().get(), host.data(), host.size(), 0, nullptr) == 1;
  ERR_clear_error();
  return covered;
}

}  // namespace ot::controld
