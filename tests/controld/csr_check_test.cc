// The CSR checks: the accepted forms, and one hostile or malformed request per rule, each
// refused with its exact message (these reach logs and API answers, so they are part of the
// behaviour).
#include "controld/issuance/csr_check.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "common/crypto.h"
#include "tests/controld/csr_builder.h"

namespace ot::controld {
namespace {

using testing::buildCsrDer;
using testing::buildCsrPem;
using testing::CsrSpec;
using testing::hostCsr;
using testing::pemOf;
using testing::TestKey;

const std::string kId = "k3xq9v2m7pta";
const std::string kDomain = "tunnel.test";
const std::string kHost = kId + "." + kDomain;
const std::string kWildcard = "*." + kHost;
const std::string kNamesRule =
    "CSR names must be exactly " + kHost + " and optionally " + kWildcard + "; got ";

Result<CsrInfo> checkTunnel(const std::string& pem) {
  return checkTunnelCsr(pem, kId, kDomain);
}

// The message of a refusal, which must be kInvalid; "" (and a failed check) when it passed.
std::string refusal(const Result<CsrInfo>& result) {
  REQUIRE_MESSAGE(!result.ok(), "the CSR was accepted");
  CHECK(result.error().kind == ErrorKind::kInvalid);
  return result.error().message;
}

std::string refusal(const CsrSpec& spec) {
  return refusal(checkTunnel(buildCsrPem(spec)));
}

CsrSpec withDns(std::vector<std::string> dns) {
  CsrSpec spec = hostCsr(kHost);
  spec.dns = std::move(dns);
  return spec;
}

TEST_CASE("csr: the hostname alone, or with its wildcard, is accepted") {
  SUBCASE("hostname alone") {
    const std::vector<uint8_t> der = buildCsrDer(hostCsr(kHost));
    const Result<CsrInfo> info = checkTunnel(pemOf(der));
    REQUIRE_MESSAGE(info.ok(), info.error().message);
    CHECK(info->names == std::vector<std::string>{kHost});
    CHECK(info->keyType == CsrKeyType::kEcdsaP256);
    CHECK(info->keyBits == 256);
    CHECK(info->derSha256Hex == crypto::toHex(crypto::sha256(std::span<const uint8_t>(der))));
    CHECK(info->derSha256Hex.size() == 64);
  }
  SUBCASE("wildcard listed first still comes back second") {
    CsrSpec spec = hostCsr(kHost);
    spec.dns = {kWildcard, kHost};
    const Result<CsrInfo> info = checkTunnel(buildCsrPem(spec));
    REQUIRE_MESSAGE(info.ok(), info.error().message);
    CHECK(info->names == std::vector<std::string>{kHost, kWildcard});
  }
  SUBCASE("P-384, RSA 2048 and SHA-384/512 signatures") {
    CsrSpec p384 = hostCsr(kHost, true);
    p384.key = TestKey::kP384;
    p384.digest = EVP_sha384();
    Result<CsrInfo> info = checkTunnel(buildCsrPem(p384));
    REQUIRE_MESSAGE(info.ok(), info.error().message);
    CHECK(info->keyType == CsrKeyType::kEcdsaP384);
    CHECK(info->keyBits == 384);
    CHECK(std::string(csrKeyTypeName(info->keyType)) == "ecdsa-p384");

    CsrSpec rsa = hostCsr(kHost, true);
    rsa.key = TestKey::kRsa2048;
    rsa.digest = EVP_sha512();
    info = checkTunnel(buildCsrPem(rsa));
    REQUIRE_MESSAGE(info.ok(), info.error().message);
    CHECK(info->keyType == CsrKeyType::kRsa);
    CHECK(info->keyBits == 2048);
    CHECK(info->names == std::vector<std::string>{kHost, kWildcard});
  }
  SUBCASE("extensions that agree with what is issued are tolerated") {
    CsrSpec spec = hostCsr(kHost, true);
    spec.extensions = {{"basicConstraints", "critical,CA:FALSE"},
                       {"keyUsage", "critical,digitalSignature,keyEncipherment"},
                       {"extendedKeyUsage", "serverAuth,clientAuth"}};
    const Result<CsrInfo> info = checkTunnel(buildCsrPem(spec));
    REQUIRE_MESSAGE(info.ok(), info.error().message);
    CHECK(info->names == std::vector<std::string>{kHost, kWildcard});
  }
}

TEST_CASE("csr: PEM layout does not change the fingerprint") {
  const std::vector<uint8_t> der = buildCsrDer(hostCsr(kHost, true));
  const Result<CsrInfo> plain = checkTunnel(pemOf(der));
  REQUIRE(plain.ok());
  for (const std::string& pem :
       {pemOf(der, "CERTIFICATE REQUEST", 76), pemOf(der, "CERTIFICATE REQUEST", 64, "\r\n"),
        "\n \t\r\n" + pemOf(der) + "\n\n  \t", pemOf(der, "CERTIFICATE REQUEST", 100000)}) {
    CAPTURE(pem);
    const Result<CsrInfo> info = checkTunnel(pem);
    REQUIRE_MESSAGE(info.ok(), info.error().message);
    CHECK(info->derSha256Hex == plain->derSha256Hex);
  }
  // Another request for the same names (a new signature) is a different CSR.
  const Result<CsrInfo> other = checkTunnel(buildCsrPem(hostCsr(kHost, true)));
  REQUIRE(other.ok());
  CHECK(other->derSha256Hex != plain->derSha256Hex);
}

TEST_CASE("csr: names in any case are accepted and come back lowercase") {
  CsrSpec spec;
  spec.subject = {{"CN", "K3XQ9V2M7PTA.Tunnel.TEST"}};
  spec.dns = {"*.k3xq9v2m7pta.TUNNEL.test", "K3xq9v2m7pta.tunnel.Test"};
  const std::string pem = buildCsrPem(spec);
  Result<CsrInfo> info = checkTunnel(pem);
  REQUIRE_MESSAGE(info.ok(), info.error().message);
  CHECK(info->names == std::vector<std::string>{kHost, kWildcard});
  // The tunnel ID and domain may come in any case too.
  info = checkTunnelCsr(pem, "K3XQ9V2M7PTA", "Tunnel.Test");
  REQUIRE_MESSAGE(info.ok(), info.error().message);
  CHECK(info->names == std::vector<std::string>{kHost, kWildcard});
}

TEST_CASE("csr: the subject must be exactly CN=<hostname>") {
  const std::string rule = "CSR subject must be exactly CN=" + kHost + "; got ";
  CsrSpec spec = hostCsr(kHost);
  SUBCASE("another tunnel's name") {
    spec.subject = {{"CN", "other.tunnel.test"}};
    CHECK(refusal(spec) == rule + "CN=other.tunnel.test");
  }
  SUBCASE("the wildcard as CN") {
    spec.subject = {{"CN", kWildcard}};
    spec.dns = {kHost, kWildcard};
    CHECK(refusal(spec) == rule + "CN=" + kWildcard);
  }
  SUBCASE("an extra attribute") {
    spec.subject = {{"CN", kHost}, {"O", "Evil Corp"}};
    CHECK(refusal(spec) == rule + "O=Evil Corp,CN=" + kHost);
  }
  SUBCASE("two common names") {
    spec.subject = {{"CN", kHost}, {"CN", "evil.com"}};
    CHECK(refusal(spec) == rule + "CN=evil.com,CN=" + kHost);
  }
  SUBCASE("no common name, only another attribute") {
    spec.subject = {{"O", kHost}};
    CHECK(refusal(spec) == rule + "O=" + kHost);
  }
  SUBCASE("an empty subject") {
    spec.subject = {};
    CHECK(refusal(spec) == rule + "an empty subject");
  }
  SUBCASE("a common name with a NUL byte") {
    spec.subject = {{"CN", kHost + std::string(1, '\0') + ".evil.com"}};
    CHECK(refusal(spec).starts_with(rule + "CN=" + kHost));
  }
}

TEST_CASE("csr: subjectAltName must list exactly the tunnel's names") {
  SUBCASE("missing") {
    CsrSpec spec = hostCsr(kHost);
    spec.addSan = false;
    CHECK(refusal(spec) == "CSR has no subjectAltName extension");
  }
  SUBCASE("present but empty") {
    CHECK(refusal(withDns({})) == kNamesRule + "none");
  }
  SUBCASE("another tunnel") {
    CHECK(refusal(withDns({kHost, "other.tunnel.test"})) ==
          kNamesRule + kHost + ", other.tunnel.test");
  }
  SUBCASE("only another name") {
    CHECK(refusal(withDns({"evil.com"})) == kNamesRule + "evil.com");
  }
  SUBCASE("the apex") {
    CHECK(refusal(withDns({kHost, kDomain})) == kNamesRule + kHost + ", tunnel.test");
  }
  SUBCASE("the domain's wildcard") {
    CHECK(refusal(withDns({kHost, "*.tunnel.test"})) == kNamesRule + kHost + ", *.tunnel.test");
  }
  SUBCASE("a name under the tunnel that is not the wildcard") {
    CHECK(refusal(withDns({kHost, "www." + kHost})) == kNamesRule + kHost + ", www." + kHost);
  }
  SUBCASE("a double wildcard") {
    CHECK(refusal(withDns({kHost, "*.*." + kHost})) == kNamesRule + kHost + ", *.*." + kHost);
  }
  SUBCASE("the wildcard alone") {
    CHECK(refusal(withDns({kWildcard})) == kNamesRule + kWildcard);
  }
  SUBCASE("a name with a NUL byte, shown escaped") {
    CHECK(refusal(withDns({kHost + std::string(1, '\0') + ".evil.com"})) ==
          kNamesRule + kHost + "\\x00.evil.com");
  }
  SUBCASE("an IPv4 address") {
    CsrSpec spec = hostCsr(kHost);
    spec.ips = {"192.0.2.7"};
    CHECK(refusal(spec) == kNamesRule + kHost + ", IP:192.0.2.7");
  }
  SUBCASE("an IPv6 address") {
    CsrSpec spec = hostCsr(kHost);
    spec.ips = {"2001:db8::1"};
    CHECK(refusal(spec) == kNamesRule + kHost + ", IP:2001:0db8:0000:0000:0000:0000:0000:0001");
  }
  SUBCASE("an email address") {
    CsrSpec spec = hostCsr(kHost);
    spec.emails = {"admin@" + kHost};
    CHECK(refusal(spec) == kNamesRule + kHost + ", email:admin@" + kHost);
  }
  SUBCASE("a URI") {
    CsrSpec spec = hostCsr(kHost);
    spec.uris = {"https://" + kHost + "/"};
    CHECK(refusal(spec) == kNamesRule + kHost + ", URI:https://" + kHost + "/");
  }
  SUBCASE("many names are listed only in part") {
    std::vector<std::string> dns;
    for (int i = 0; i < 20; ++i) dns.push_back("n" + std::to_string(i) + ".tunnel.test");
    CHECK(refusal(withDns(dns)) ==
          kNamesRule +
              "n0.tunnel.test, n1.tunnel.test, n2.tunnel.test, n3.tunnel.test, n4.tunnel.test, "
              "n5.tunnel.test, n6.tunnel.test, n7.tunnel.test, ... (20 names)");
  }
}

TEST_CASE("csr: each name at most once") {
  CHECK(refusal(withDns({kHost, kHost})) == "CSR lists " + kHost + " more than once");
  CHECK(refusal(withDns({kHost, kWildcard, "*.K3XQ9V2M7PTA.tunnel.test"})) ==
        "CSR lists " + kWildcard + " more than once");
  CsrSpec twice = hostCsr(kHost);
  twice.sanTwice = true;
  CHECK(refusal(twice) ==
        "CSR asks for the X509v3 Subject Alternative Name extension more than once");
}

TEST_CASE("csr: the signature must verify with an accepted algorithm") {
  for (const TestKey key : {TestKey::kP256, TestKey::kRsa2048}) {
    CsrSpec spec = hostCsr(kHost, true);
    spec.key = key;
    spec.corruptSignature = true;
    CHECK(refusal(spec) == "CSR signature does not verify");
  }
  CsrSpec sha1 = hostCsr(kHost);
  sha1.digest = EVP_sha1();
  CHECK(refusal(sha1) ==
        "CSR signature algorithm ecdsa-with-SHA1 is not accepted; sign with SHA-256, SHA-384 or "
        "SHA-512 (RSA PKCS#1 v1.5 or ECDSA)");
  sha1.key = TestKey::kRsa2048;
  CHECK(refusal(sha1).starts_with("CSR signature algorithm sha1WithRSAEncryption is not"));
}

TEST_CASE("csr: key types") {
  const std::string rule =
      "CSR key must be ECDSA P-256 or P-384, or RSA of 2048 to 4096 bits; got ";
  CsrSpec spec = hostCsr(kHost);
  SUBCASE("RSA 1024") {
    spec.key = TestKey::kRsa1024;
    CHECK(refusal(spec) == rule + "RSA of 1024 bits");
  }
  SUBCASE("RSA just above 4096 bits; 4096 itself is accepted") {
    spec.key = TestKey::kRsa4104;
    CHECK(refusal(spec) == rule + "RSA of 4104 bits");
    spec.key = TestKey::kRsa4096;
    const Result<CsrInfo> info = checkTunnel(buildCsrPem(spec));
    REQUIRE_MESSAGE(info.ok(), info.error().message);
    CHECK(info->keyBits == 4096);
  }
  SUBCASE("Ed25519: no public CA issues for it and browsers do not accept it") {
    spec.key = TestKey::kEd25519;
    CHECK(refusal(spec) == rule + "Ed25519");
  }
  SUBCASE("P-521") {
    spec.key = TestKey::kP521;
    CHECK(refusal(spec) == rule + "ECDSA on secp521r1");
  }
  SUBCASE("P-256 with explicit curve parameters") {
    spec.key = TestKey::kP256Explicit;
    CHECK(refusal(spec) == rule + "an EC key with explicit curve parameters");
  }
}

TEST_CASE("csr: other extensions and attributes are refused") {
  CsrSpec spec = hostCsr(kHost);
  SUBCASE("must-staple") {
    spec.extensions = {{"tlsfeature", "status_request"}};
    CHECK(refusal(spec) == "CSR asks for the TLS Feature extension, which is not accepted");
  }
  SUBCASE("an unknown extension") {
    spec.extensions = {{"1.3.6.1.4.1.99999.1", "DER:05:00"}};
    CHECK(refusal(spec) == "CSR asks for the 1.3.6.1.4.1.99999.1 extension, which is not accepted");
  }
  SUBCASE("a CA certificate") {
    spec.extensions = {{"basicConstraints", "critical,CA:TRUE"}};
    CHECK(refusal(spec) == "CSR basicConstraints must be CA:FALSE without pathlen");
  }
  SUBCASE("a path length") {
    spec.extensions = {{"basicConstraints", "CA:FALSE,pathlen:0"}};
    CHECK(refusal(spec) == "CSR basicConstraints must be CA:FALSE without pathlen");
  }
  SUBCASE("a CA key usage") {
    spec.extensions = {{"keyUsage", "digitalSignature,keyCertSign"}};
    CHECK(refusal(spec) == "CSR keyUsage may only ask for digitalSignature and keyEncipherment");
  }
  SUBCASE("code signing") {
    spec.extensions = {{"extendedKeyUsage", "serverAuth,codeSigning"}};
    CHECK(refusal(spec) ==
          "CSR extendedKeyUsage may only ask for serverAuth and clientAuth; got Code Signing");
  }
  SUBCASE("client authentication alone") {
    spec.extensions = {{"extendedKeyUsage", "clientAuth"}};
    CHECK(refusal(spec) == "CSR extendedKeyUsage must include serverAuth");
  }
  SUBCASE("a repeated extension") {
    spec.extensions = {{"keyUsage", "digitalSignature"}, {"keyUsage", "digitalSignature"}};
    CHECK(refusal(spec) == "CSR asks for the X509v3 Key Usage extension more than once");
  }
  SUBCASE("a challenge password") {
    spec.challengePassword = true;
    CHECK(refusal(spec) ==
          "CSR attribute challengePassword is not accepted; only extensionRequest is");
  }
}

TEST_CASE("csr: the text must be one CERTIFICATE REQUEST block and nothing else") {
  const std::vector<uint8_t> der = buildCsrDer(hostCsr(kHost));
  const std::string pem = pemOf(der);
  CHECK(refusal(checkTunnel("")) == "CSR is empty");
  CHECK(refusal(checkTunnel(" \n\t\r\n")) == "CSR is empty");
  CHECK(refusal(checkTunnel("hello")) ==
        "CSR is not PEM: it must start with -----BEGIN CERTIFICATE REQUEST-----");
  CHECK(refusal(checkTunnel("junk\n" + pem)) ==
        "CSR is not PEM: it must start with -----BEGIN CERTIFICATE REQUEST-----");
  CHECK(refusal(checkTunnel(pem + pem)) == "CSR holds more than one PEM block");
  CHECK(refusal(checkTunnel(pem + pemOf(der, "CERTIFICATE"))) ==
        "CSR holds more than one PEM block");
  CHECK(refusal(checkTunnel(pem + "junk\n")) ==
        "CSR must end with -----END CERTIFICATE REQUEST----- and hold nothing after it but "
        "whitespace");
  CHECK(refusal(checkTunnel(pem.substr(0, pem.size() - 20))) ==
        "CSR must end with -----END CERTIFICATE REQUEST----- and hold nothing after it but "
        "whitespace");
  CHECK(refusal(checkTunnel(pemOf(der, "CERTIFICATE"))) ==
        "CSR must be a PEM block labelled CERTIFICATE REQUEST; got -----BEGIN CERTIFICATE-----");
  CHECK(refusal(checkTunnel(pemOf(der, "NEW CERTIFICATE REQUEST"))) ==
        "CSR must be a PEM block labelled CERTIFICATE REQUEST; got -----BEGIN NEW CERTIFICATE "
        "REQUEST-----");
  const std::string kBase64 = "CSR PEM body is not valid base64 (or has PEM headers)";
  std::string headers = pem;
  headers.insert(headers.find('\n') + 1, "Proc-Type: 4,ENCRYPTED\n\n");
  CHECK(refusal(checkTunnel(headers)) == kBase64);
  std::string badCharacter = pem;
  badCharacter[40] = '!';
  CHECK(refusal(checkTunnel(badCharacter)) == kBase64);
  CHECK(refusal(checkTunnel("-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE "
                            "REQUEST-----\n")) == "CSR PEM block is empty");
}

TEST_CASE("csr: the DER must be one PKCS#10 request") {
  const std::vector<uint8_t> der = buildCsrDer(hostCsr(kHost));
  std::vector<uint8_t> trailing = der;
  trailing.push_back(0);
  CHECK(refusal(checkTunnel(pemOf(trailing))) == "CSR has bytes after the request");
  const std::vector<uint8_t> truncated(der.begin(), der.begin() + 100);
  CHECK(refusal(checkTunnel(pemOf(truncated))) == "CSR is not a valid PKCS#10 certificate request");
  const std::vector<uint8_t> garbage = {0x30, 0x03, 0x02, 0x01, 0x00};
  CHECK(refusal(checkTunnel(pemOf(garbage))) == "CSR is not a valid PKCS#10 certificate request");
  // Every truncation is refused, none crashes.
  for (size_t length = 0; length < der.size(); ++length) {
    CAPTURE(length);
    const std::vector<uint8_t> prefix(der.begin(), der.begin() + static_cast<long>(length));
    CHECK_FALSE(checkTunnel(pemOf(prefix)).ok());
  }
}

TEST_CASE("csr: at most 16 KiB of text") {
  const std::string pem = buildCsrPem(hostCsr(kHost));
  const std::string atLimit = pem + std::string(kMaxCsrPemSize - pem.size(), '\n');
  REQUIRE(atLimit.size() == 16384);
  CHECK(checkTunnel(atLimit).ok());
  CHECK(refusal(checkTunnel(atLimit + "\n")) == "CSR is larger than 16384 bytes");
  // A well-formed request that is too large on its own.
  CsrSpec big = hostCsr(kHost);
  for (int i = 0; i < 800; ++i) big.dns.push_back("name" + std::to_string(i) + ".tunnel.test");
  CHECK(refusal(checkTunnel(buildCsrPem(big))) == "CSR is larger than 16384 bytes");
}

TEST_CASE("csr: the tunnel ID and domain given by the caller must be valid") {
  const std::string pem = buildCsrPem(hostCsr(kHost));
  CHECK(refusal(checkTunnelCsr(pem, "", kDomain)) == "tunnel ID  is not valid");
  CHECK(refusal(checkTunnelCsr(pem, "a.b", kDomain)) == "tunnel ID a.b is not valid");
  CHECK(refusal(checkTunnelCsr(pem, kId, "")) == "domain  does not make a valid hostname");
  CHECK(refusal(checkTunnelCsr(pem, kId, "tunnel..test")) ==
        "domain tunnel..test does not make a valid hostname");
  CHECK(refusal(checkTunnelCsr(pem, kId, "*.tunnel.test")) ==
        "domain *.tunnel.test does not make a valid hostname");
  CHECK(refusal(checkServerCsr(pem, "bad_domain")) == "domain bad_domain is not a valid hostname");
}

TEST_CASE("csr: the API domain's CSR names exactly the domain") {
  const Result<CsrInfo> info = checkServerCsr(buildCsrPem(hostCsr("Tunnel.Test")), "tunnel.test");
  REQUIRE_MESSAGE(info.ok(), info.error().message);
  CHECK(info->names == std::vector<std::string>{"tunnel.test"});
  CHECK(refusal(checkServerCsr(buildCsrPem(hostCsr("tunnel.test", true)), "tunnel.test")) ==
        "CSR names must be exactly tunnel.test; got tunnel.test, *.tunnel.test");
  CHECK(refusal(checkServerCsr(buildCsrPem(hostCsr(kHost)), "tunnel.test")) ==
        "CSR subject must be exactly CN=tunnel.test; got CN=" + kHost);
}

TEST_CASE("csr: checkCsrForNames, as the issuer checks again") {
  const std::string pem = buildCsrPem(hostCsr(kHost, true));
  const Result<CsrInfo> info = checkCsrForNames(pem, {kHost, kWildcard});
  REQUIRE_MESSAGE(info.ok(), info.error().message);
  CHECK(info->names == std::vector<std::string>{kHost, kWildcard});
  CHECK(refusal(checkCsrForNames(pem, {kHost})) ==
        "CSR names must be exactly " + kHost + "; got " + kHost + ", " + kWildcard);
  CHECK(refusal(checkCsrForNames(pem, {kHost, kWildcard, "extra.tunnel.test"})) ==
        "CSR names must be exactly " + kHost + ", " + kWildcard + ", extra.tunnel.test; got " +
            kHost + ", " + kWildcard);
  const std::string kBadNames =
      "names to issue for must be distinct lowercase hostnames, the first without a wildcard";
  CHECK(refusal(checkCsrForNames(pem, {})) == kBadNames);
  CHECK(refusal(checkCsrForNames(pem, {kWildcard, kHost})) == kBadNames);
  CHECK(refusal(checkCsrForNames(pem, {kHost, kHost})) == kBadNames);
  CHECK(refusal(checkCsrForNames(pem, {"ABC.tunnel.test"})) == kBadNames);
}

}  // namespace
}  // namespace ot::controld
