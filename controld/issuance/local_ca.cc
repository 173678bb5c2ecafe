#include "controld/issuance/local_ca.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <system_error>

#include "common/clock.h"
#include "common/crypto.h"
#include "controld/issuance/csr_check.h"

namespace ot::controld {
namespace {

constexpr int64_t kLeafBackdateMs = 60 * 1000;
// The root is backdated more than leaves: controlds on one database may disagree on the time a
// little, and a root "not yet valid" on one of them would break every leaf it signs.
constexpr int64_t kRootBackdateS = 60 * 60;
constexpr int64_t kRootLifetimeS = 3653LL * 24 * 60 * 60;  // ten years
constexpr size_t kSerialBytes = 16;

Error internal(std::string what) {
  return Error{ErrorKind::kInternal, std::move(what) + ": " + takeOpensslError()};
}

Error badRow(const std::string& why) {
  ERR_clear_error();
  return Error{ErrorKind::kInvalid, std::string("meta row ") + LocalCa::kMetaKey +
                                        " does not hold a usable local CA (" + why +
                                        "); delete the row to have a new one made"};
}

int noPassphrase(char* /*buffer*/, int /*size*/, int /*writing*/, void* /*data*/) {
  return 0;
}

std::optional<int64_t> unixSeconds(const ASN1_TIME* time) {
  using AsnTimePtr = std::unique_ptr<ASN1_TIME, OpensslFree<ASN1_TIME_free>>;
  const AsnTimePtr epoch(ASN1_TIME_set(nullptr, 0));
  int days = 0;
  int seconds = 0;
  if (epoch == nullptr || ASN1_TIME_diff(&days, &seconds, epoch.get(), time) != 1) {
    ERR_clear_error();
    return std::nullopt;
  }
  return int64_t{days} * 86400 + seconds;
}

// A positive serial of exactly kSerialBytes: the top bit cleared keeps it positive, the next one
// set keeps its length fixed.
Result<IntegerPtr> randomSerial() {
  std::optional<std::vector<uint8_t>> bytes = crypto::randomBytes(kSerialBytes);
  if (!bytes) return Error{ErrorKind::kUnavailable, "no randomness for a certificate serial"};
  (*bytes)[0] = static_cast<uint8_t>(((*bytes)[0] & 0x7f) | 0x40);
  const BignumPtr number(BN_bin2bn(bytes->data(), static_cast<int>(bytes->size()), nullptr));
  IntegerPtr serial(number == nullptr ? nullptr : BN_to_ASN1_INTEGER(number.get(), nullptr));
  if (serial == nullptr) return internal("cannot encode a certificate serial");
  return serial;
}

Status addExtension(X509* certificate, int nid, void* value, bool critical) {
  if (X509_add1_ext_i2d(certificate, nid, value, critical ? 1 : 0, X509V3_ADD_DEFAULT) != 1) {
    return internal(std::string("cannot add the ") + OBJ_nid2sn(nid) + " extension");
  }
  return Ok{};
}

Status addKeyUsage(X509* certificate, std::initializer_list<int> bits) {
  const BitStringPtr usage(ASN1_BIT_STRING_new());
  if (usage == nullptr) return internal("cannot allocate keyUsage");
  for (const int bit : bits) {
    if (ASN1_BIT_STRING_set_bit(usage.get(), bit, 1) != 1) return internal("cannot set keyUsage");
  }
  return addExtension(certificate, NID_key_usage, usage.get(), true);
}

Status addBasicConstraints(X509* certificate, bool ca) {
  const BasicConstraintsPtr constraints(BASIC_CONSTRAINTS_new());
  if (constraints == nullptr) return internal("cannot allocate basicConstraints");
  if (ca) {
    constraints->ca = 0xff;  // DER TRUE
    constraints->pathlen = ASN1_INTEGER_new();
    if (constraints->pathlen == nullptr || ASN1_INTEGER_set(constraints->pathlen, 0) != 1) {
      return internal("cannot set pathlen");
    }
  }
  return addExtension(certificate, NID_basic_constraints, constraints.get(), true);
}

Result<std::vector<uint8_t>> publicKeyId(X509* certificate) {
  // RFC 5280 section 4.2.1.2, method 1: SHA-1 of the subjectPublicKey bits.
  std::vector<uint8_t> id(EVP_MAX_MD_SIZE);
  unsigned int length = 0;
  if (X509_pubkey_digest(certificate, EVP_sha1(), id.data(), &length) != 1) {
    return internal("cannot hash the public key");
  }
  id.resize(length);
  return id;
}

Status addSubjectKeyId(X509* certificate) {
  Result<std::vector<uint8_t>> id = publicKeyId(certificate);
  if (!id.ok()) return id.error();
  const OctetStringPtr value(ASN1_OCTET_STRING_new());
  if (value == nullptr ||
      ASN1_OCTET_STRING_set(value.get(), id->data(), static_cast<int>(id->size())) != 1) {
    return internal("cannot allocate subjectKeyIdentifier");
  }
  return addExtension(certificate, NID_subject_key_identifier, value.get(), false);
}

Status addAuthorityKeyId(X509* certificate, const std::vector<uint8_t>& issuerKeyId) {
  const AuthorityKeyIdPtr id(AUTHORITY_KEYID_new());
  if (id == nullptr) return internal("cannot allocate authorityKeyIdentifier");
  id->keyid = ASN1_OCTET_STRING_new();
  if (id->keyid == nullptr || ASN1_OCTET_STRING_set(id->keyid, issuerKeyId.data(),
                                                    static_cast<int>(issuerKeyId.size())) != 1) {
    return internal("cannot set authorityKeyIdentifier");
  }
  return addExtension(certificate, NID_authority_key_identifier, id.get(), false);
}

// A v3 certificate with a fresh serial, subject CN=common_name, the given issuer (null: itself),
// validity and public key; extensions and signature are the caller's.
Result<X509Ptr> startCertificate(const std::string& commonName, const X509_NAME* issuer,
                                 EVP_PKEY* key, int64_t notBeforeS, int64_t notAfterS) {
  X509Ptr certificate(X509_new());
  if (certificate == nullptr) return internal("cannot allocate a certificate");
  Result<IntegerPtr> serial = randomSerial();
  if (!serial.ok()) return serial.error();
  X509_NAME* subject = X509_get_subject_name(certificate.get());
  if (X509_set_version(certificate.get(), X509_VERSION_3) != 1 ||
      X509_set_serialNumber(certificate.get(), serial->get()) != 1 ||
      X509_NAME_add_entry_by_NID(subject, NID_commonName, MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(commonName.data()),
                                 static_cast<int>(commonName.size()), -1, 0) != 1 ||
      X509_set_issuer_name(certificate.get(), issuer != nullptr ? issuer : subject) != 1 ||
      ASN1_TIME_set(X509_getm_notBefore(certificate.get()), notBeforeS) == nullptr ||
      ASN1_TIME_set(X509_getm_notAfter(certificate.get()), notAfterS) == nullptr ||
      X509_set_pubkey(certificate.get(), key) != 1) {
    return internal("cannot fill in the certificate");
  }
  return certificate;
}

Status sign(X509* certificate, EVP_PKEY* key) {
  if (X509_sign(certificate, key, EVP_sha256()) <= 0) return internal("cannot sign a certificate");
  return Ok{};
}

// A new root, as the JSON the meta row holds.
Result<std::string> createRoot(int64_t nowMs) {
  Result<EvpPkeyPtr> key = generateEcKey("P-256");
  if (!key.ok()) return key.error();
  const int64_t nowS = nowMs / 1000;
  Result<X509Ptr> root = startCertificate(LocalCa::kCommonName, nullptr, key->get(),
                                          nowS - kRootBackdateS, nowS + kRootLifetimeS);
  if (!root.ok()) return root.error();
  X509* certificate = root->get();
  Status status = addBasicConstraints(certificate, true);
  if (status.ok()) status = addKeyUsage(certificate, {5, 6});  // keyCertSign, cRLSign
  if (status.ok()) status = addSubjectKeyId(certificate);
  if (status.ok()) status = sign(certificate, key->get());
  if (!status.ok()) return status.error();
  Result<std::string> rootPem = certificatePem(certificate);
  if (!rootPem.ok()) return rootPem.error();
  Result<std::string> keyPem = privateKeyPem(key->get());
  if (!keyPem.ok()) return keyPem.error();
  return nlohmann::json{{"cert", *rootPem}, {"key", *keyPem}}.dump();
}

Error fileError(const std::string& what, const std::filesystem::path& path, int error) {
  return Error{ErrorKind::kInvalid, "cannot " + what + " " + path.string() + ": " +
                                        std::generic_category().message(error)};
}

}  // namespace

Result<std::unique_ptr<LocalCa>> LocalCa::load(MetaStore& store, int64_t leafValidityMs,
                                               Clock nowMs) {
  if (leafValidityMs <= 0) {
    return Error{ErrorKind::kInvalid, "the local CA's leaf validity must be positive"};
  }
  if (!nowMs) nowMs = unixNowMs;
  Result<std::optional<std::string>> stored = store.getMeta(kMetaKey);
  if (!stored.ok()) return stored.error();
  if (!stored->has_value()) {
    Result<std::string> created = createRoot(nowMs());
    if (!created.ok()) return created.error();
    Result<bool> inserted = store.insertMetaIfAbsent(kMetaKey, *created);
    if (!inserted.ok()) return inserted.error();
    // Whichever controld inserted first, the row now holds the one root everybody uses.
    stored = store.getMeta(kMetaKey);
    if (!stored.ok()) return stored.error();
    if (!stored->has_value()) {
      return Error{ErrorKind::kInternal,
                   std::string("meta row ") + kMetaKey + " is missing right after it was written"};
    }
  }
  std::unique_ptr<LocalCa> ca(new LocalCa(leafValidityMs, std::move(nowMs)));
  if (Status adopted = ca->adopt(**stored); !adopted.ok()) return adopted.error();
  return ca;
}

Status LocalCa::adopt(const std::string& stored) {
  const nlohmann::json json = nlohmann::json::parse(stored, nullptr, false);
  if (json.is_discarded() || !json.is_object()) return badRow("not JSON");
  const auto cert = json.find("cert");
  const auto key = json.find("key");
  if (cert == json.end() || !cert->is_string() || key == json.end() || !key->is_string()) {
    return badRow("expected {\"cert\": PEM, \"key\": PEM}");
  }
  const std::string& certPem = cert->get_ref<const std::string&>();
  const std::string& keyPem = key->get_ref<const std::string&>();
  const BioPtr certBio(BIO_new_mem_buf(certPem.data(), static_cast<int>(certPem.size())));
  caCertificate_.reset(
      certBio == nullptr ? nullptr : PEM_read_bio_X509(certBio.get(), nullptr, nullptr, nullptr));
  if (caCertificate_ == nullptr) return badRow("the certificate does not parse");
  const BioPtr keyBio(BIO_new_mem_buf(keyPem.data(), static_cast<int>(keyPem.size())));
  caKey_.reset(keyBio == nullptr
                   ? nullptr
                   : PEM_read_bio_PrivateKey(keyBio.get(), nullptr, noPassphrase, nullptr));
  if (caKey_ == nullptr) return badRow("the private key does not parse");
  if (X509_check_private_key(caCertificate_.get(), caKey_.get()) != 1) {
    return badRow("the private key does not match the certificate");
  }
  if (X509_check_ca(caCertificate_.get()) == 0) return badRow("the certificate is not a CA");
  const ASN1_OCTET_STRING* keyId = X509_get0_subject_key_id(caCertificate_.get());
  if (keyId == nullptr) return badRow("the certificate has no subjectKeyIdentifier");
  const std::span<const uint8_t> keyIdBytes = bytesOf(keyId);
  caKeyId_.assign(keyIdBytes.begin(), keyIdBytes.end());
  const std::optional<int64_t> notAfter = unixSeconds(X509_get0_notAfter(caCertificate_.get()));
  if (!notAfter) return badRow("the certificate's expiry does not parse");
  caNotAfterS_ = *notAfter;
  Result<std::string> pem = certificatePem(caCertificate_.get());
  if (!pem.ok()) return pem.error();
  caCertificatePem_ = std::move(pem).value();
  return Ok{};
}

Result<IssuedCertificate> LocalCa::issue(const IssueRequest& request,
                                         const std::atomic<bool>& cancel) {
  if (cancel.load()) return Error{ErrorKind::kUnavailable, "issuance cancelled"};
  const Result<CsrInfo> csr = checkCsrForNames(request.csrPem, request.names);
  if (!csr.ok()) return csr.error();
  Result<std::vector<uint8_t>> der = csrDerFromPem(request.csrPem);
  if (!der.ok()) return der.error();
  const auto csrObject = decodeWhole<X509ReqPtr>(d2i_X509_REQ, *der);
  EVP_PKEY* subjectKey = csrObject ? X509_REQ_get0_pubkey(csrObject.get()) : nullptr;
  if (subjectKey == nullptr) return internal("the checked CSR does not decode again");

  const int64_t nowMs = nowMs_();
  if (nowMs / 1000 >= caNotAfterS_) {
    return Error{ErrorKind::kInternal, std::string("the local CA has expired; delete meta row ") +
                                           kMetaKey + " to have a new one made"};
  }
  const int64_t notBeforeS = (nowMs - kLeafBackdateMs) / 1000;
  const int64_t notAfterS = std::min((nowMs + leafValidityMs_) / 1000, caNotAfterS_);

  const std::lock_guard lock(signMutex_);
  Result<X509Ptr> leaf =
      startCertificate(request.names.front(), X509_get_subject_name(caCertificate_.get()),
                       subjectKey, notBeforeS, notAfterS);
  if (!leaf.ok()) return leaf.error();
  X509* certificate = leaf->get();
  Result<GeneralNamesPtr> san = dnsGeneralNames(request.names);
  if (!san.ok()) return san.error();
  const ExtendedKeyUsagePtr usages(sk_ASN1_OBJECT_new_null());
  if (usages == nullptr || sk_ASN1_OBJECT_push(usages.get(), OBJ_nid2obj(NID_server_auth)) <= 0) {
    return internal("cannot allocate extendedKeyUsage");
  }
  Status status = addBasicConstraints(certificate, false);
  if (status.ok()) {
    // digitalSignature, plus keyEncipherment for RSA keys (TLS 1.2's RSA key exchange).
    status = csr->keyType == CsrKeyType::kRsa ? addKeyUsage(certificate, {0, 2})
                                              : addKeyUsage(certificate, {0});
  }
  if (status.ok()) status = addExtension(certificate, NID_ext_key_usage, usages.get(), false);
  if (status.ok()) status = addExtension(certificate, NID_subject_alt_name, san->get(), false);
  if (status.ok()) status = addSubjectKeyId(certificate);
  if (status.ok()) status = addAuthorityKeyId(certificate, caKeyId_);
  if (status.ok()) status = sign(certificate, caKey_.get());
  if (!status.ok()) return status.error();
  Result<std::string> pem = certificatePem(certificate);
  if (!pem.ok()) return pem.error();
  return IssuedCertificate{std::move(pem).value(), notBeforeS * 1000, notAfterS * 1000};
}

Status LocalCa::writeCaFile(const std::string& path) const {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::optional<std::vector<uint8_t>> suffix = crypto::randomBytes(6);
  if (!suffix) return Error{ErrorKind::kUnavailable, "no randomness for a temporary file name"};
  const fs::path temporary =
      target.parent_path() / ("." + target.filename().string() + ".tmp-" + crypto::toHex(*suffix));
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return fileError("create", temporary, errno);
  std::string_view rest = caCertificatePem_;
  int error = 0;
  while (!rest.empty() && error == 0) {
    const ssize_t written = ::write(fd, rest.data(), rest.size());
    if (written > 0) {
      rest.remove_prefix(static_cast<size_t>(written));
    } else if (written == 0 || errno != EINTR) {
      error = written == 0 ? EIO : errno;
    }
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error == 0 && ::rename(temporary.c_str(), target.c_str()) != 0) error = errno;
  if (error != 0) {
    ::unlink(temporary.c_str());
    return fileError("write", target, error);
  }
  return Ok{};
}

}  // namespace ot::controld
