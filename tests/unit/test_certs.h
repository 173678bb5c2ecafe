// Throwaway PKI for tests: a CA and leaves signed by it, all EC P-256, generated in memory with
// OpenSSL (no fixture files, nothing that expires in the tree). Not for production use.
//
//   auto ca = ot::test::makeCa("Test CA");
//   auto leaf = ot::test::makeLeaf(ca, "example.test");
//   leaf.certPem + ca.certPem  -> a chain PEM; leaf.keyPem -> the key; ca.certPem -> a CA file.
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>

namespace ot::test {

struct PkeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;

struct TestCert {
  PkeyPtr key;
  X509Ptr cert;
  std::string certPem;  // this certificate only
  std::string keyPem;   // PKCS#8, unencrypted
};

namespace detail {

inline std::string bioToString(BIO* bio) {
  std::string text(BIO_ctrl_pending(bio), '\0');
  if (!text.empty()) {
    const int n = BIO_read(bio, text.data(), static_cast<int>(text.size()));
    text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  }
  BIO_free(bio);
  return text;
}

inline std::string certToPem(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  return bioToString(bio);
}

inline std::string keyToPem(EVP_PKEY* key) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(bio, key, nullptr, nullptr, 0, nullptr, nullptr);
  return bioToString(bio);
}

inline PkeyPtr p256Key() {
  EVP_PKEY* key = nullptr;
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr);
  if (ctx != nullptr && EVP_PKEY_keygen_init(ctx) == 1 &&
      EVP_PKEY_CTX_set_group_name(ctx, "P-256") == 1) {
    EVP_PKEY_keygen(ctx, &key);
  }
  EVP_PKEY_CTX_free(ctx);
  return PkeyPtr(key);
}

inline void addExt(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext != nullptr) {
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
}

inline void setName(X509_NAME* name, const std::string& commonName) {
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(commonName.c_str()), -1, -1, 0);
}

// `issuer` null: self-signed (the new certificate is its own issuer).
inline TestCert build(const std::string& commonName, const TestCert* issuer, bool isCa,
                      const std::string& subjectAltName, long serial) {
  TestCert out;
  out.key = p256Key();
  out.cert.reset(X509_new());
  X509* cert = out.cert.get();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert), 7L * 24 * 3600);
  X509_set_pubkey(cert, out.key.get());
  setName(X509_get_subject_name(cert), commonName);
  X509* issuerCert = issuer != nullptr ? issuer->cert.get() : cert;
  EVP_PKEY* issuerKey = issuer != nullptr ? issuer->key.get() : out.key.get();
  X509_set_issuer_name(cert, X509_get_subject_name(issuerCert));
  if (isCa) {
    addExt(cert, issuerCert, NID_basic_constraints, "critical,CA:TRUE");
    addExt(cert, issuerCert, NID_key_usage, "critical,keyCertSign,cRLSign");
    addExt(cert, issuerCert, NID_subject_key_identifier, "hash");
  } else {
    addExt(cert, issuerCert, NID_basic_constraints, "critical,CA:FALSE");
    addExt(cert, issuerCert, NID_key_usage, "critical,digitalSignature");
    addExt(cert, issuerCert, NID_ext_key_usage, "serverAuth");
    addExt(cert, issuerCert, NID_authority_key_identifier, "keyid:always");
    if (!subjectAltName.empty()) {
      addExt(cert, issuerCert, NID_subject_alt_name, subjectAltName.c_str());
    }
  }
  X509_sign(cert, issuerKey, EVP_sha256());
  out.certPem = certToPem(cert);
  out.keyPem = keyToPem(out.key.get());
  return out;
}

}  // namespace detail

inline TestCert makeCa(const std::string& commonName) {
  return detail::build(commonName, nullptr, true, "", 1);
}

// A server leaf for `dnsName` (also its CN and only subjectAltName).
inline TestCert makeLeaf(const TestCert& ca, const std::string& dnsName, long serial = 2) {
  return detail::build(dnsName, &ca, false, "DNS:" + dnsName, serial);
}

// `ca`'s certificate in a file of its own in the temporary directory, for as long as this lives
// (a client context takes a path); `tag` names the test. A file that cannot be written throws,
// which fails the test that made it.
class CaFile {
 public:
  CaFile(const TestCert& ca, const std::string& tag)
      : path_(std::filesystem::temp_directory_path() /
              ("ot-" + tag + "-ca-" + std::to_string(::getpid()) + ".pem")) {
    std::ofstream file(path_);
    file << ca.certPem;
    file.close();
    if (!file) throw std::runtime_error("cannot write the test CA file " + path_.string());
  }
  ~CaFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  CaFile(const CaFile&) = delete;
  CaFile& operator=(const CaFile&) = delete;

  [[nodiscard]] std::string string() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace ot::test
