// The API domain's own key and CSR: what controld makes passes its own check, and the CSR carries
// the key it stored.
#include "controld/domain_cert/server_key.h"

#include <doctest/doctest.h>
#include <openssl/pem.h>

#include "controld/base/openssl_util.h"
#include "controld/issuance/csr_check.h"

namespace ot::controld {
namespace {

EvpPkeyPtr parseKey(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return EvpPkeyPtr(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

EvpPkeyPtr csrKey(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  X509ReqPtr request(PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr));
  REQUIRE(request != nullptr);
  return EvpPkeyPtr(X509_REQ_get_pubkey(request.get()));
}

TEST_CASE("csr: the API domain's key and CSR pass the server check") {
  const Result<ServerKeyAndCsr> made = makeServerKeyAndCsr("Tunnel.Test");
  REQUIRE_MESSAGE(made.ok(), made.error().message);
  CHECK(made->keyPem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
  CHECK(made->csrPem.starts_with("-----BEGIN CERTIFICATE REQUEST-----\n"));
  const Result<CsrInfo> info = checkServerCsr(made->csrPem, "tunnel.test");
  REQUIRE_MESSAGE(info.ok(), info.error().message);
  CHECK(info->names == std::vector<std::string>{"tunnel.test"});
  CHECK(info->keyType == CsrKeyType::kEcdsaP256);

  const EvpPkeyPtr key = parseKey(made->keyPem);
  REQUIRE(key != nullptr);
  CHECK(EVP_PKEY_eq(key.get(), csrKey(made->csrPem).get()) == 1);

  // A fresh key each time.
  const Result<ServerKeyAndCsr> again = makeServerKeyAndCsr("tunnel.test");
  REQUIRE(again.ok());
  CHECK(again->keyPem != made->keyPem);
}

TEST_CASE("csr: a renewal CSR reuses the stored key") {
  const Result<ServerKeyAndCsr> made = makeServerKeyAndCsr("tunnel.test");
  REQUIRE(made.ok());
  const Result<std::string> csr = makeCsr({"tunnel.test"}, made->keyPem);
  REQUIRE_MESSAGE(csr.ok(), csr.error().message);
  CHECK(*csr != made->csrPem);  // ECDSA signatures are randomized
  CHECK(checkServerCsr(*csr, "tunnel.test").ok());
  CHECK(EVP_PKEY_eq(csrKey(*csr).get(), csrKey(made->csrPem).get()) == 1);

  const Result<std::string> two = makeCsr({"a.tunnel.test", "*.a.tunnel.test"}, made->keyPem);
  REQUIRE(two.ok());
  const Result<CsrInfo> info = checkTunnelCsr(*two, "a", "tunnel.test");
  REQUIRE_MESSAGE(info.ok(), info.error().message);
  CHECK(info->names == std::vector<std::string>{"a.tunnel.test", "*.a.tunnel.test"});
}

TEST_CASE("csr: bad inputs for the API domain's key and CSR") {
  const Result<ServerKeyAndCsr> badDomain = makeServerKeyAndCsr("not a domain");
  REQUIRE_FALSE(badDomain.ok());
  CHECK(badDomain.error().kind == ErrorKind::kInvalid);
  CHECK(badDomain.error().message == "domain not a domain is not a valid hostname");

  const Result<std::string> badKey = makeCsr({"tunnel.test"}, "not a key");
  REQUIRE_FALSE(badKey.ok());
  CHECK(badKey.error().kind == ErrorKind::kInvalid);
  CHECK(badKey.error().message.starts_with("the private key does not parse"));
  const Result<std::string> noNames = makeCsr({}, "not a key");
  REQUIRE_FALSE(noNames.ok());
  CHECK(noNames.error().message == "a CSR needs at least one name");
}

}  // namespace
}  // namespace ot::controld
