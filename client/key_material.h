// The tunnel's private key and certificate signing request, made on the user's machine so the key
// never leaves it. Pure OpenSSL, no I/O: any thread may call.
//
// The CSR is what controld accepts for a tunnel (controld/issuance/csr_check.h): ECDSA P-256,
// SHA-256, subject exactly CN=<hostname>, subjectAltName with the hostname and, when the tunnel has
// named routes (<route>.<hostname>), its wildcard *.<hostname>; nothing else.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ot::client {

// A new P-256 key as PKCS#8 PEM ("BEGIN PRIVATE KEY").
[[nodiscard]] Result<std::string> generatePrivateKeyPem();

// The key parses (unencrypted PEM) and is an EC key on P-256.
[[nodiscard]] Status checkPrivateKeyPem(std::string_view keyPem);

// A PEM CSR for `hostname` (lowercase) signed by the key; with `wildcard` it also asks for
// *.<hostname>.
[[nodiscard]] Result<std::string> makeCsrPem(std::string_view keyPem, std::string_view hostname,
                                             bool wildcard);

// What a CSR asks for, to decide whether a saved one still fits.
struct CsrSummary {
  std::string commonName;
  std::vector<std::string> dnsNames;  // in the order of the subjectAltName
  bool signatureValid = false;
};
[[nodiscard]] Result<CsrSummary> readCsr(std::string_view csrPem);

// The CSR's public key is the key's.
[[nodiscard]] bool csrMatchesKey(std::string_view csrPem, std::string_view keyPem);

// The first certificate of the chain is for the key.
[[nodiscard]] bool certificateMatchesKey(std::string_view chainPem, std::string_view keyPem);

// The first certificate of the chain has not expired and names `hostname` (and, with `wildcard`,
// covers the names under it): enough to serve visitors without asking the server first.
[[nodiscard]] bool certificateServes(std::string_view chainPem, std::string_view hostname,
                                     bool wildcard);

}  // namespace ot::client
