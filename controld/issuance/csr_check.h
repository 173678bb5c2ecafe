// Which certificate signing requests controld passes to a CA. A tunnel may only ask for its own
// names, <id>.<domain> and optionally *.<id>.<domain>; the API domain's certificate only for the
// domain. The checks run when a CSR is bound or imported and again right before each issuance, so
// a tampered record never reaches the CA. Pure (no I/O, no shared state): any thread may call.
//
// The one accepted form; anything else is kInvalid with a message that says what was wrong:
//  - Text: a single PEM block labelled CERTIFICATE REQUEST (not NEW CERTIFICATE REQUEST), at most
//    kMaxCsrPemSize bytes counting surrounding whitespace, nothing else around it but whitespace,
//    no PEM headers, strict base64. The DER inside is one PKCS#10 v1 request with no trailing
//    bytes.
//  - Key: ECDSA on P-256 or P-384 with a named curve, or RSA of 2048 to 4096 bits. Ed25519,
//    Ed448, RSA-PSS and other curves are refused: the public ACME CAs do not issue for them, and
//    browsers do not accept Ed25519 certificates, so such a CSR could never serve its tunnel.
//  - Signature: the self-signature verifies, with SHA-256/384/512 (PKCS#1 v1.5 or ECDSA).
//  - Subject: exactly one attribute, CN = the hostname (a UTF8String, PrintableString or
//    IA5String). Organisation and the like are refused rather than dropped in silence.
//  - Attributes: only extensionRequest (no challengePassword and the like).
//  - Extensions: subjectAltName is required and lists dNSNames only, exactly the allowed set, each
//    once. Also tolerated, because they agree with what is issued and are never copied into it:
//    basicConstraints CA:FALSE without pathlen, keyUsage of digitalSignature and/or
//    keyEncipherment, extendedKeyUsage serverAuth (with clientAuth allowed beside it). Anything
//    else is refused, for example the TLS feature (must-staple): a CA would honour it, and
//    nothing here staples OCSP responses.
//  - Names compare without regard to ASCII case (DNS names are case-insensitive, and tools differ
//    in what they write) and come back lowercase.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ot::controld {

inline constexpr size_t kMaxCsrPemSize = 16 * 1024;

enum class CsrKeyType { kEcdsaP256, kEcdsaP384, kRsa };
[[nodiscard]] const char* csrKeyTypeName(CsrKeyType type);  // "ecdsa-p256", "ecdsa-p384", "rsa"

struct CsrInfo {
  // Lowercase; the hostname first, then its wildcard when the CSR asks for it.
  std::vector<std::string> names;
  CsrKeyType keyType = CsrKeyType::kEcdsaP256;
  int keyBits = 0;  // 256, 384, or the RSA modulus size
  // SHA-256 of the DER request, lowercase hex: binding the same CSR again gives the same value,
  // whatever its PEM line breaks.
  std::string derSha256Hex;
};

// A tunnel's CSR: names exactly {<id>.<domain>} or {<id>.<domain>, *.<id>.<domain>}. The tunnel
// ID must be a valid one (isValidTunnelId) and the domain a hostname; either may be given in any
// case.
[[nodiscard]] Result<CsrInfo> checkTunnelCsr(std::string_view pem, std::string_view tunnelId,
                                             std::string_view domain);

// The API domain's own certificate: names exactly {domain}.
[[nodiscard]] Result<CsrInfo> checkServerCsr(std::string_view pem, std::string_view domain);

// For an issuer: the CSR asks for exactly `names` (lowercase, distinct, the first one the CN)
// and satisfies every rule above. Issuers call it again on what a job hands them.
[[nodiscard]] Result<CsrInfo> checkCsrForNames(std::string_view pem,
                                               const std::vector<std::string>& names);

// The DER bytes of the text's single PEM block, under the PEM rules above; nothing else checked.
[[nodiscard]] Result<std::vector<uint8_t>> csrDerFromPem(std::string_view pem);

}  // namespace ot::controld
