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
  CHECK(made->key_pem.starts_with("-----BEGIN PRIVATE KEY-----\n"));
  CHECK(made->csr_pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----\n"));
  const Result<CsrInfo> info = checkServerCsr(made->csr_pem, "tunnel.test");
  REQUIRE_MESSAGE(info.ok(), info.error().message);
  CHECK(info->names == std::vector<std::string>{"tunnel.test"});
  CHECK(info->key_type == CsrKeyType::kEcdsaP256);

  const EvpPkeyPtr key = parseKey(made->key_pem);
  REQUIRE(key != nullptr);
  CHECK(EVP_PKEY_eq(key.get(), csrKey(made->csr_pem).get()) == 1);

  // A fresh key each time.
  const Result<ServerKeyAndCsr> again = makeServerKeyAndCsr("tunnel.test");
  REQUIRE(again.ok());
  CHECK(again->key_pem != made->key_pem);
}

TEST_CASE("csr: a renewal CSR reuses the stored key") {
  const Result<ServerKeyAndCsr> made = makeServerKeyAndCsr("tunnel.test");
  REQUIRE(made.ok());
  const Result<std::string> csr = makeCsr({"tunnel.test"}, made->key_pem);
  REQUIRE_MESSAGE(csr.ok(), csr.error().message);
  CHECK(*csr != made->csr_pem);  // ECDSA signatures are randomized
  CHECK(checkServerCsr(*csr, "tunnel.test").ok());
  CHECK(EVP_PKEY_eq(csrKey(*csr).get(), csrKey(made->csr_pem).get()) == 1);

  const Result<std::string> two = makeCsr({"a.tunnel.test", "*.a.tunnel.test"}, made->key_pem);
  REQUIRE(two.ok());
  const Result<CsrInfo> info = checkTunnelCsr(*two, "a", "tunnel.test");
  REQUIRE_MESSAGE(info.ok(), info.error().message);
  CHECK(info->names == std::vector<std::string>{"a.tunnel.test", "*.a.tunnel.test"});
}

TEST_CASE("csr: bad inputs for the API domain's key and CSR") {
  const Result<ServerKeyAndCsr> bad_domain = makeServerKeyAndCsr("not a domain");
  REQUIRE_FALSE(bad_domain.ok());
  CHECK(bad_domain.error().kind == ErrorKind::kInvalid);
  CHECK(bad_domain.error().message == "domain not a domain is not a valid hostname");

  const Result<std::string> bad_key = makeCsr({"tunnel.test"}, "not a key");
  REQUIRE_FALSE(bad_key.ok());
  CHECK(bad_key.error().kind == ErrorKind::kInvalid);
  CHECK(bad_key.error().message.starts_with("the private key does not parse"));
  const Result<std::string> no_names = makeCsr({}, "not a key");
  REQUIRE_FALSE(no_names.ok());
  CHECK(no_names.error().message == "a CSR needs at least one name");
}

}  // namespace
}  // namespace ot::controld
