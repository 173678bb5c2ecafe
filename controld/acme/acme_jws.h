// The JOSE pieces of ACME (RFC 8555 section 6.2, RFC 7515/7517/7518/7638): the account key as a
// P-256 JWK, its thumbprint, ES256 signatures as raw r||s, JWS in the flattened JSON
// serialization, the HS256 external account binding, and the DNS-01 TXT value. Pure (OpenSSL
// only, no I/O); every function may be called from any thread, keys are only read.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "controld/base/openssl_util.h"

namespace ot::controld::jws {

// A new P-256 key as a private JWK: {"crv","d","kty","x","y"} (what `controld account-key`
// prints).
[[nodiscard]] Result<std::string> generateAccountKeyJwk();
// The key of a private P-256 JWK; kInvalid for anything else (other curves, RSA, a missing or
// malformed member, a d that does not match x and y).
[[nodiscard]] Result<EvpPkeyPtr> parsePrivateJwk(std::string_view jwkJson);
// A P-256 key's private JWK (object members in lexicographic order).
[[nodiscard]] Result<std::string> privateJwk(EVP_PKEY* key);
// The public JWK {"crv":"P-256","kty":"EC","x":...,"y":...}.
[[nodiscard]] Result<nlohmann::json> publicJwk(EVP_PKEY* key);
// RFC 7638: base64url(SHA-256(the required members, sorted, no whitespace)).
[[nodiscard]] std::string thumbprint(const nlohmann::json& publicJwk);

// ES256 over `data`: 64 bytes, r then s, each left-padded to 32 (RFC 7518 section 3.4).
[[nodiscard]] Result<std::vector<uint8_t>> signEs256(EVP_PKEY* key, std::string_view data);
// {"protected","payload","signature"}: ES256 over base64url(protected) "." base64url(payload).
// An empty payload stays empty (POST-as-GET).
[[nodiscard]] Result<nlohmann::json> signJws(EVP_PKEY* key, const nlohmann::json& protectedHeader,
                                             std::string_view payload);
// The same with HS256 (the external account binding's MAC).
[[nodiscard]] nlohmann::json signHs256(std::span<const uint8_t> macKey,
                                       const nlohmann::json& protectedHeader,
                                       std::string_view payload);
// The externalAccountBinding member of newAccount (RFC 8555 section 7.3.4): HS256 over the
// account's public JWK with {"alg":"HS256","kid":kid,"url":new_account_url}. `hmac_key_b64url`
// is the CA's base64url MAC key; kInvalid when it does not decode.
[[nodiscard]] Result<nlohmann::json> externalAccountBinding(const std::string& kid,
                                                            const std::string& hmacKeyB64url,
                                                            const nlohmann::json& accountJwk,
                                                            const std::string& newAccountUrl);

// The DNS-01 TXT value: base64url(SHA-256(token "." thumbprint)) (RFC 8555 section 8.4).
[[nodiscard]] std::string dns01Value(std::string_view token, std::string_view accountThumbprint);

}  // namespace ot::controld::jws
