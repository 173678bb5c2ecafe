#include "controld/acme/acme_jws.h"

#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/param_build.h>

#include <array>
#include <memory>
#include <optional>

#include "common/base64.h"
#include "common/crypto.h"

namespace ot::controld::jws {
namespace {

constexpr size_t kCoordinateSize = 32;
using ParamBldPtr = std::unique_ptr<OSSL_PARAM_BLD, OpensslFree<OSSL_PARAM_BLD_free>>;
using ParamPtr = std::unique_ptr<OSSL_PARAM, OpensslFree<OSSL_PARAM_free>>;
using EcdsaSigPtr = std::unique_ptr<ECDSA_SIG, OpensslFree<ECDSA_SIG_free>>;
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, OpensslFree<EVP_MD_CTX_free>>;

Error invalid(const std::string& message) {
  return Error{ErrorKind::kInvalid, message};
}

std::optional<std::vector<uint8_t>> bignumBytes(EVP_PKEY* key, const char* param) {
  BIGNUM* raw = nullptr;
  if (EVP_PKEY_get_bn_param(key, param, &raw) != 1) {
    ERR_clear_error();
    return std::nullopt;
  }
  const BignumPtr number(raw);
  std::vector<uint8_t> bytes(kCoordinateSize);
  if (BN_bn2binpad(number.get(), bytes.data(), static_cast<int>(bytes.size())) < 0) {
    ERR_clear_error();
    return std::nullopt;
  }
  return bytes;
}

bool isP256(EVP_PKEY* key) {
  std::array<char, 64> group{};
  size_t length = 0;
  if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group.data(), group.size(),
                                     &length) != 1) {
    ERR_clear_error();
    return false;
  }
  const std::string_view name(group.data(), length);
  return name == "prime256v1" || name == "P-256";
}

std::optional<std::vector<uint8_t>> member(const nlohmann::json& jwk, const char* name) {
  const auto found = jwk.find(name);
  if (found == jwk.end() || !found->is_string()) return std::nullopt;
  auto bytes = base64::decodeUrl(found->get<std::string>());
  if (!bytes || bytes->size() != kCoordinateSize) return std::nullopt;
  return bytes;
}

std::string encodeJson(const nlohmann::json& value) {
  return base64::encodeUrl(value.dump());
}

}  // namespace

Result<std::string> generateAccountKeyJwk() {
  auto key = generateEcKey("P-256");
  if (!key) return key.error();
  return privateJwk(key->get());
}

Result<EvpPkeyPtr> parsePrivateJwk(std::string_view jwkJson) {
  const auto jwk = nlohmann::json::parse(jwkJson, nullptr, false);
  if (!jwk.is_object()) return invalid("the account key is not a JSON object");
  if (jwk.value("kty", "") != "EC" || jwk.value("crv", "") != "P-256") {
    return invalid("the account key must be an EC P-256 JWK");
  }
  auto x = member(jwk, "x");
  auto y = member(jwk, "y");
  auto d = member(jwk, "d");
  if (!x || !y || !d) return invalid("the account key needs x, y and d of 32 bytes each");
  std::vector<uint8_t> point{0x04};
  point.insert(point.end(), x->begin(), x->end());
  point.insert(point.end(), y->begin(), y->end());
  const BignumPtr secret(BN_bin2bn(d->data(), static_cast<int>(d->size()), nullptr));
  const ParamBldPtr builder(OSSL_PARAM_BLD_new());
  if (!secret || !builder ||
      OSSL_PARAM_BLD_push_utf8_string(builder.get(), OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) !=
          1 ||
      OSSL_PARAM_BLD_push_octet_string(builder.get(), OSSL_PKEY_PARAM_PUB_KEY, point.data(),
                                       point.size()) != 1 ||
      OSSL_PARAM_BLD_push_BN(builder.get(), OSSL_PKEY_PARAM_PRIV_KEY, secret.get()) != 1) {
    return Error{ErrorKind::kInternal, "cannot build the key: " + takeOpensslError()};
  }
  const ParamPtr params(OSSL_PARAM_BLD_to_param(builder.get()));
  const EvpPkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr));
  EVP_PKEY* raw = nullptr;
  if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &raw, EVP_PKEY_KEYPAIR, params.get()) != 1) {
    return invalid("the account key is not a valid P-256 key: " + takeOpensslError());
  }
  EvpPkeyPtr key(raw);
  // fromdata accepts a d that does not belong to the point; a full check refuses it.
  const EvpPkeyCtxPtr check(EVP_PKEY_CTX_new_from_pkey(nullptr, key.get(), nullptr));
  if (!check || EVP_PKEY_check(check.get()) != 1) {
    return invalid("the account key's d does not match x and y: " + takeOpensslError());
  }
  return key;
}

Result<std::string> privateJwk(EVP_PKEY* key) {
  auto jwk = publicJwk(key);
  if (!jwk) return jwk.error();
  auto d = bignumBytes(key, OSSL_PKEY_PARAM_PRIV_KEY);
  if (!d) return invalid("the key has no private part");
  (*jwk)["d"] = base64::encodeUrl(*d);
  return jwk->dump();  // nlohmann::json objects keep their members sorted
}

Result<nlohmann::json> publicJwk(EVP_PKEY* key) {
  if (key == nullptr || !isP256(key)) return invalid("not a P-256 key");
  auto x = bignumBytes(key, OSSL_PKEY_PARAM_EC_PUB_X);
  auto y = bignumBytes(key, OSSL_PKEY_PARAM_EC_PUB_Y);
  if (!x || !y) return invalid("cannot read the key's public point");
  return nlohmann::json{
      {"crv", "P-256"}, {"kty", "EC"}, {"x", base64::encodeUrl(*x)}, {"y", base64::encodeUrl(*y)}};
}

std::string thumbprint(const nlohmann::json& publicJwk) {
  // Built by hand so the member order and spelling are exactly RFC 7638's, whatever else the
  // object holds.
  const std::string canonical = R"({"crv":)" + publicJwk.at("crv").dump() + R"(,"kty":)" +
                                publicJwk.at("kty").dump() + R"(,"x":)" + publicJwk.at("x").dump() +
                                R"(,"y":)" + publicJwk.at("y").dump() + "}";
  const auto digest = crypto::sha256(canonical);
  return base64::encodeUrl(std::span<const uint8_t>(digest));
}

Result<std::vector<uint8_t>> signEs256(EVP_PKEY* key, std::string_view data) {
  const MdCtxPtr ctx(EVP_MD_CTX_new());
  size_t length = 0;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &length,
                     reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1) {
    return Error{ErrorKind::kInternal, "cannot sign: " + takeOpensslError()};
  }
  std::vector<uint8_t> der(length);
  if (EVP_DigestSign(ctx.get(), der.data(), &length,
                     reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1) {
    return Error{ErrorKind::kInternal, "cannot sign: " + takeOpensslError()};
  }
  der.resize(length);
  const unsigned char* cursor = der.data();
  const EcdsaSigPtr signature(d2i_ECDSA_SIG(nullptr, &cursor, static_cast<long>(der.size())));
  if (!signature) return Error{ErrorKind::kInternal, "unreadable ECDSA signature"};
  const BIGNUM* r = nullptr;
  const BIGNUM* s = nullptr;
  ECDSA_SIG_get0(signature.get(), &r, &s);
  std::vector<uint8_t> raw(2 * kCoordinateSize);
  if (BN_bn2binpad(r, raw.data(), kCoordinateSize) < 0 ||
      BN_bn2binpad(s, raw.data() + kCoordinateSize, kCoordinateSize) < 0) {
    return Error{ErrorKind::kInternal, "ECDSA signature too long for ES256"};
  }
  return raw;
}

Result<nlohmann::json> signJws(EVP_PKEY* key, const nlohmann::json& protectedHeader,
                               std::string_view payload) {
  const std::string header = encodeJson(protectedHeader);
  const std::string body = payload.empty() ? std::string() : base64::encodeUrl(payload);
  auto signature = signEs256(key, header + "." + body);
  if (!signature) return signature.error();
  return nlohmann::json{
      {"protected", header}, {"payload", body}, {"signature", base64::encodeUrl(*signature)}};
}

nlohmann::json signHs256(std::span<const uint8_t> macKey, const nlohmann::json& protectedHeader,
                         std::string_view payload) {
  const std::string header = encodeJson(protectedHeader);
  const std::string body = base64::encodeUrl(payload);
  const auto mac = crypto::hmacSha256(macKey, crypto::asBytes(header + "." + body));
  return nlohmann::json{{"protected", header},
                        {"payload", body},
                        {"signature", base64::encodeUrl(std::span<const uint8_t>(mac))}};
}

Result<nlohmann::json> externalAccountBinding(const std::string& kid,
                                              const std::string& hmacKeyB64url,
                                              const nlohmann::json& accountJwk,
                                              const std::string& newAccountUrl) {
  // CAs hand the key out in base64url; some pad it, which the strict decoder refuses.
  std::string keyText = hmacKeyB64url;
  while (!keyText.empty() && keyText.back() == '=') keyText.pop_back();
  auto macKey = base64::decodeUrl(keyText);
  if (!macKey || macKey->empty()) return invalid("ACME_EAB_HMAC_KEY is not base64url");
  const nlohmann::json header{{"alg", "HS256"}, {"kid", kid}, {"url", newAccountUrl}};
  return signHs256(*macKey, header, accountJwk.dump());
}

std::string dns01Value(std::string_view token, std::string_view accountThumbprint) {
  std::string authorization(token);
  authorization += '.';
  authorization += accountThumbprint;
  const auto digest = crypto::sha256(authorization);
  return base64::encodeUrl(std::span<const uint8_t>(digest));
}

}  // namespace ot::controld::jws
