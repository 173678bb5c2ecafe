#include "client/key_material.h"

#include <doctest/doctest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <string>
#include <vector>

#include "tests/client/test_certificate.h"

namespace {

using namespace ot::client;

// Parses the CSR with OpenSSL directly, independent of readCsr, and lists what controld's checker
// looks at (controld/issuance/csr_check.h): subject entries, SAN entries, attributes, algorithm.
struct ParsedCsr {
  long version = -1;
  std::vector<std::string> subject;  // "CN=..." per entry
  std::vector<std::string> san;      // "DNS:..." or "OTHER"
  int attributes = 0;
  int extensions = 0;
  int signatureNid = 0;
  bool verifies = false;
  std::string curve;
};

std::string text(const ASN1_STRING* value) {
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(value)),
                     static_cast<size_t>(ASN1_STRING_length(value)));
}

ParsedCsr parse(const std::string& pem) {
  ParsedCsr parsed;
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509_REQ* request = PEM_read_bio_X509_REQ(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  REQUIRE(request != nullptr);
  parsed.version = X509_REQ_get_version(request);
  const X509_NAME* subject = X509_REQ_get_subject_name(request);
  for (int i = 0; i < X509_NAME_entry_count(subject); ++i) {
    const X509_NAME_ENTRY* entry = X509_NAME_get_entry(subject, i);
    const int nid = OBJ_obj2nid(X509_NAME_ENTRY_get_object(entry));
    parsed.subject.push_back(std::string(OBJ_nid2sn(nid)) + "=" +
                             text(X509_NAME_ENTRY_get_data(entry)));
  }
  parsed.attributes = X509_REQ_get_attr_count(request);
  STACK_OF(X509_EXTENSION)* extensions = X509_REQ_get_extensions(request);
  parsed.extensions = extensions ? sk_X509_EXTENSION_num(extensions) : 0;
  auto* names = static_cast<GENERAL_NAMES*>(
      X509V3_get_d2i(extensions, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names, i);
    parsed.san.push_back(name->type == GEN_DNS ? "DNS:" + text(name->d.dNSName) : "OTHER");
  }
  GENERAL_NAMES_free(names);
  sk_X509_EXTENSION_pop_free(extensions, X509_EXTENSION_free);
  parsed.signatureNid = X509_REQ_get_signature_nid(request);
  EVP_PKEY* key = X509_REQ_get0_pubkey(request);
  parsed.verifies = X509_REQ_verify(request, key) == 1;
  char group[64] = {};
  size_t length = 0;
  if (EVP_PKEY_get_group_name(key, group, sizeof group, &length) == 1) parsed.curve = group;
  X509_REQ_free(request);
  return parsed;
}

}  // namespace

TEST_CASE("client key material: a P-256 PKCS#8 key that parses back") {
  auto key = generatePrivateKeyPem();
  REQUIRE(key.ok());
  CHECK(key->starts_with("-----BEGIN PRIVATE KEY-----\n"));
  CHECK(checkPrivateKeyPem(*key).ok());
  auto other = generatePrivateKeyPem();
  REQUIRE(other.ok());
  CHECK(*other != *key);
  CHECK_FALSE(checkPrivateKeyPem("not a key").ok());
  CHECK_FALSE(checkPrivateKeyPem("").ok());
}

TEST_CASE("client key material: the CSR names exactly the tunnel's hostname") {
  auto key = generatePrivateKeyPem();
  REQUIRE(key.ok());
  auto csr = makeCsrPem(*key, "k3x9q2.tunnels.test", false);
  REQUIRE(csr.ok());
  CHECK(csr->starts_with("-----BEGIN CERTIFICATE REQUEST-----\n"));
  CHECK(csr->ends_with("-----END CERTIFICATE REQUEST-----\n"));
  const ParsedCsr parsed = parse(*csr);
  CHECK(parsed.version == 0);  // PKCS#10 v1
  CHECK(parsed.subject == std::vector<std::string>{"CN=k3x9q2.tunnels.test"});
  CHECK(parsed.san == std::vector<std::string>{"DNS:k3x9q2.tunnels.test"});
  CHECK(parsed.attributes == 1);  // extensionRequest only
  CHECK(parsed.extensions == 1);  // subjectAltName only
  CHECK(parsed.signatureNid == NID_ecdsa_with_SHA256);
  CHECK(parsed.verifies);
  CHECK(parsed.curve == "prime256v1");

  auto summary = readCsr(*csr);
  REQUIRE(summary.ok());
  CHECK(summary->commonName == "k3x9q2.tunnels.test");
  CHECK(summary->dnsNames == std::vector<std::string>{"k3x9q2.tunnels.test"});
  CHECK(summary->signatureValid);
}

TEST_CASE("client key material: with named routes the CSR adds the wildcard") {
  auto key = generatePrivateKeyPem();
  REQUIRE(key.ok());
  auto csr = makeCsrPem(*key, "abc.tunnels.test", true);
  REQUIRE(csr.ok());
  const ParsedCsr parsed = parse(*csr);
  CHECK(parsed.subject == std::vector<std::string>{"CN=abc.tunnels.test"});
  CHECK(parsed.san == std::vector<std::string>{"DNS:abc.tunnels.test", "DNS:*.abc.tunnels.test"});
  CHECK(parsed.verifies);
}

TEST_CASE("client key material: CSR and certificate are matched to their key") {
  auto key = generatePrivateKeyPem();
  auto other = generatePrivateKeyPem();
  REQUIRE(key.ok());
  REQUIRE(other.ok());
  auto csr = makeCsrPem(*key, "abc.tunnels.test", false);
  REQUIRE(csr.ok());
  CHECK(csrMatchesKey(*csr, *key));
  CHECK_FALSE(csrMatchesKey(*csr, *other));
  CHECK_FALSE(csrMatchesKey("garbage", *key));

  const std::string certificate = ot::client::testing::selfSigned(*key);
  CHECK(certificateMatchesKey(certificate, *key));
  CHECK_FALSE(certificateMatchesKey(certificate, *other));
  CHECK_FALSE(certificateMatchesKey("", *key));

  CHECK_FALSE(makeCsrPem("not a key", "abc.tunnels.test", false).ok());
  CHECK_FALSE(readCsr("not a csr").ok());
}

TEST_CASE("client key material: a saved certificate serves only while current and for its names") {
  using ot::client::testing::selfSigned;
  auto key = generatePrivateKeyPem();
  REQUIRE(key.ok());
  const std::string bare = selfSigned(*key, 3600, {"abc.tunnels.test"});
  const std::string both = selfSigned(*key, 3600, {"abc.tunnels.test", "*.abc.tunnels.test"});
  CHECK(certificateServes(bare, "abc.tunnels.test", false));
  CHECK_FALSE(certificateServes(bare, "abc.tunnels.test", true));  // named routes need *.
  CHECK(certificateServes(both, "abc.tunnels.test", true));
  CHECK_FALSE(certificateServes(bare, "xyz.tunnels.test", false));
  CHECK_FALSE(certificateServes(selfSigned(*key, -60, {"abc.tunnels.test"}), "abc.tunnels.test",
                                false));  // expired
  CHECK_FALSE(certificateServes("", "abc.tunnels.test", false));
  CHECK_FALSE(certificateServes(bare, "", false));
}
