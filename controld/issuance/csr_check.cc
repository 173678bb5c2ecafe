#include "controld/issuance/csr_check.h"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/obj_mac.h>

#include <algorithm>
#include <array>
#include <set>

#include "common/base64.h"
#include "common/crypto.h"
#include "controld/base/openssl_util.h"
#include "controld/base/x509_text.h"
#include "controld/store/tunnel_record.h"

namespace ot::controld {
namespace {

constexpr std::string_view kBeginLine = "-----BEGIN CERTIFICATE REQUEST-----";
constexpr std::string_view kEndLine = "-----END CERTIFICATE REQUEST-----";
constexpr std::string_view kKeyRule =
    "CSR key must be ECDSA P-256 or P-384, or RSA of 2048 to 4096 bits";
constexpr size_t kMaxShownNames = 8;

Error invalid(std::string message) {
  return Error{ErrorKind::kInvalid, std::move(message)};
}

char lowerAscii(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), lowerAscii);
  return out;
}

bool isSpace(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

// Lowercase labels of [a-z0-9-], 1 to 63 characters, not starting or ending with '-'.
bool isHostname(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  size_t start = 0;
  while (start <= name.size()) {
    const size_t dot = std::min(name.find('.', start), name.size());
    const std::string_view label = name.substr(start, dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (const char c : label) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
    }
    start = dot + 1;
  }
  return true;
}

// The names a CSR must ask for: all of `required` (the first one is the CN), any of `optional`,
// nothing else.
struct NameRule {
  std::vector<std::string> required;
  std::vector<std::string> optional;
};

std::string describeRule(const NameRule& rule) {
  std::string out = "exactly ";
  for (size_t i = 0; i < rule.required.size(); ++i) out += (i ? ", " : "") + rule.required[i];
  for (const std::string& name : rule.optional) out += " and optionally " + name;
  return out;
}

bool contains(const std::vector<std::string>& list, std::string_view name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

struct KeyFacts {
  CsrKeyType type = CsrKeyType::kEcdsaP256;
  int bits = 0;
};

Result<KeyFacts> checkKey(EVP_PKEY* key) {
  if (key == nullptr) {
    ERR_clear_error();
    return invalid(std::string(kKeyRule) + "; got a key that cannot be decoded");
  }
  switch (EVP_PKEY_get_base_id(key)) {
    case EVP_PKEY_EC: {
      // A key with explicit curve parameters has no group name, or says so in its encoding.
      std::array<char, 64> group{};
      std::array<char, 32> encoding{};
      size_t length = 0;
      if (EVP_PKEY_get_group_name(key, group.data(), group.size(), &length) != 1 ||
          EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_EC_ENCODING, encoding.data(),
                                         encoding.size(), &length) != 1 ||
          std::string_view(encoding.data()) != OSSL_PKEY_EC_ENCODING_GROUP) {
        ERR_clear_error();
        return invalid(std::string(kKeyRule) + "; got an EC key with explicit curve parameters");
      }
      const int curve = OBJ_sn2nid(group.data());
      if (curve == NID_X9_62_prime256v1) return KeyFacts{CsrKeyType::kEcdsaP256, 256};
      if (curve == NID_secp384r1) return KeyFacts{CsrKeyType::kEcdsaP384, 384};
      return invalid(std::string(kKeyRule) + "; got ECDSA on " + quotedValue(group.data()));
    }
    case EVP_PKEY_RSA: {
      const int bits = EVP_PKEY_get_bits(key);
      if (bits < 2048 || bits > 4096) {
        return invalid(std::string(kKeyRule) + "; got RSA of " + std::to_string(bits) + " bits");
      }
      return KeyFacts{CsrKeyType::kRsa, bits};
    }
    case EVP_PKEY_ED25519:
      return invalid(std::string(kKeyRule) + "; got Ed25519");
    case EVP_PKEY_ED448:
      return invalid(std::string(kKeyRule) + "; got Ed448");
    case EVP_PKEY_RSA_PSS:
      return invalid(std::string(kKeyRule) + "; got RSA-PSS");
    default:
      return invalid(std::string(kKeyRule) + "; got another key type");
  }
}

Status checkSignature(X509_REQ* request, EVP_PKEY* key) {
  switch (X509_REQ_get_signature_nid(request)) {
    case NID_sha256WithRSAEncryption:
    case NID_sha384WithRSAEncryption:
    case NID_sha512WithRSAEncryption:
    case NID_ecdsa_with_SHA256:
    case NID_ecdsa_with_SHA384:
    case NID_ecdsa_with_SHA512:
      break;
    default: {
      const X509_ALGOR* algorithm = nullptr;
      X509_REQ_get0_signature(request, nullptr, &algorithm);
      const ASN1_OBJECT* object = nullptr;
      X509_ALGOR_get0(&object, nullptr, nullptr, algorithm);
      return invalid("CSR signature algorithm " + objectName(object) +
                     " is not accepted; sign with SHA-256, SHA-384 or SHA-512 (RSA PKCS#1 v1.5 "
                     "or ECDSA)");
    }
  }
  if (X509_REQ_verify(request, key) != 1) {
    ERR_clear_error();
    return invalid("CSR signature does not verify");
  }
  return Ok{};
}

// The extensions the request asks for (null when it asks for none); refuses other attributes.
Result<X509ExtensionsPtr> requestedExtensions(X509_REQ* request) {
  X509ExtensionsPtr found;
  const int count = X509_REQ_get_attr_count(request);
  for (int i = 0; i < count; ++i) {
    X509_ATTRIBUTE* attribute = X509_REQ_get_attr(request, i);
    const ASN1_OBJECT* object = X509_ATTRIBUTE_get0_object(attribute);
    if (OBJ_obj2nid(object) != NID_ext_req) {
      return invalid("CSR attribute " + objectName(object) +
                     " is not accepted; only extensionRequest is");
    }
    if (found != nullptr) return invalid("CSR has more than one extensionRequest attribute");
    const ASN1_TYPE* value = X509_ATTRIBUTE_get0_type(attribute, 0);
    if (X509_ATTRIBUTE_count(attribute) != 1 || value == nullptr ||
        value->type != V_ASN1_SEQUENCE) {
      return invalid("CSR extensionRequest attribute is malformed");
    }
    found = decodeWhole<X509ExtensionsPtr>(d2i_X509_EXTENSIONS, bytesOf(value->value.sequence));
    if (found == nullptr) return invalid("CSR extensionRequest attribute is malformed");
  }
  return found;
}

Status checkKeyUsage(std::span<const uint8_t> der) {
  const BitStringPtr bits = decodeWhole<BitStringPtr>(d2i_ASN1_BIT_STRING, der);
  if (bits == nullptr) return invalid("CSR keyUsage extension is malformed");
  const int total = ASN1_STRING_length(bits.get()) * 8;
  for (int bit = 0; bit < total; ++bit) {
    // 0 is digitalSignature, 2 keyEncipherment (RFC 5280 section 4.2.1.3).
    if (bit != 0 && bit != 2 && ASN1_BIT_STRING_get_bit(bits.get(), bit) == 1) {
      return invalid("CSR keyUsage may only ask for digitalSignature and keyEncipherment");
    }
  }
  return Ok{};
}

Status checkExtendedKeyUsage(std::span<const uint8_t> der) {
  const ExtendedKeyUsagePtr usages = decodeWhole<ExtendedKeyUsagePtr>(d2i_EXTENDED_KEY_USAGE, der);
  if (usages == nullptr) return invalid("CSR extendedKeyUsage extension is malformed");
  bool serverAuth = false;
  for (int i = 0; i < sk_ASN1_OBJECT_num(usages.get()); ++i) {
    const ASN1_OBJECT* usage = sk_ASN1_OBJECT_value(usages.get(), i);
    const int nid = OBJ_obj2nid(usage);
    if (nid == NID_server_auth) {
      serverAuth = true;
    } else if (nid != NID_client_auth) {
      return invalid("CSR extendedKeyUsage may only ask for serverAuth and clientAuth; got " +
                     objectName(usage));
    }
  }
  if (!serverAuth) return invalid("CSR extendedKeyUsage must include serverAuth");
  return Ok{};
}

// Applies the extension rules; returns the subjectAltName.
Result<GeneralNamesPtr> checkExtensions(const X509_EXTENSIONS* extensions) {
  GeneralNamesPtr names;
  std::set<std::string> seen;
  const int count = extensions == nullptr ? 0 : sk_X509_EXTENSION_num(extensions);
  for (int i = 0; i < count; ++i) {
    X509_EXTENSION* extension = sk_X509_EXTENSION_value(extensions, i);
    const ASN1_OBJECT* object = X509_EXTENSION_get_object(extension);
    const std::string name = objectName(object);
    std::array<char, 128> oid{};
    OBJ_obj2txt(oid.data(), static_cast<int>(oid.size()), object, 1);
    if (!seen.insert(oid.data()).second) {
      return invalid("CSR asks for the " + name + " extension more than once");
    }
    const std::span<const uint8_t> der = bytesOf(X509_EXTENSION_get_data(extension));
    switch (OBJ_obj2nid(object)) {
      case NID_subject_alt_name:
        names = decodeWhole<GeneralNamesPtr>(d2i_GENERAL_NAMES, der);
        if (names == nullptr) return invalid("CSR subjectAltName extension is malformed");
        break;
      case NID_basic_constraints: {
        const auto constraints = decodeWhole<BasicConstraintsPtr>(d2i_BASIC_CONSTRAINTS, der);
        if (constraints == nullptr) return invalid("CSR basicConstraints extension is malformed");
        if (constraints->ca != 0 || constraints->pathlen != nullptr) {
          return invalid("CSR basicConstraints must be CA:FALSE without pathlen");
        }
        break;
      }
      case NID_key_usage:
        if (Status status = checkKeyUsage(der); !status.ok()) return status.error();
        break;
      case NID_ext_key_usage:
        if (Status status = checkExtendedKeyUsage(der); !status.ok()) return status.error();
        break;
      default:
        return invalid("CSR asks for the " + name + " extension, which is not accepted");
    }
  }
  if (names == nullptr) return invalid("CSR has no subjectAltName extension");
  return names;
}

Status checkSubject(X509_REQ* request, const std::string& host) {
  const X509_NAME* subject = X509_REQ_get_subject_name(request);
  const auto wrong = [&] {
    return invalid("CSR subject must be exactly CN=" + host + "; got " + describeName(subject));
  };
  if (X509_NAME_entry_count(subject) != 1) return wrong();
  const X509_NAME_ENTRY* entry = X509_NAME_get_entry(subject, 0);
  if (OBJ_obj2nid(X509_NAME_ENTRY_get_object(entry)) != NID_commonName) return wrong();
  const ASN1_STRING* value = X509_NAME_ENTRY_get_data(entry);
  const int type = ASN1_STRING_type(value);
  if (type != V_ASN1_UTF8STRING && type != V_ASN1_PRINTABLESTRING && type != V_ASN1_IA5STRING) {
    return invalid("CSR common name must be a UTF8String, PrintableString or IA5String");
  }
  if (lowercase(asn1Text(value)) != host) return wrong();
  return Ok{};
}

Result<std::vector<std::string>> matchNames(const GENERAL_NAMES* san, const NameRule& rule) {
  std::vector<std::string> dns;
  std::string got;
  bool onlyDns = true;
  const int count = sk_GENERAL_NAME_num(san);
  for (int i = 0; i < count; ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(san, i);
    if (name->type == GEN_DNS) {
      dns.push_back(lowercase(asn1Text(name->d.dNSName)));
    } else {
      onlyDns = false;
    }
    if (static_cast<size_t>(i) < kMaxShownNames) {
      got += (i ? ", " : "") + describeGeneralName(name);
    } else if (static_cast<size_t>(i) == kMaxShownNames) {
      got += ", ... (" + std::to_string(count) + " names)";
    }
  }
  if (count == 0) got = "none";
  bool allowed = onlyDns;
  for (const std::string& name : dns) {
    allowed = allowed && (contains(rule.required, name) || contains(rule.optional, name));
  }
  for (const std::string& name : rule.required) allowed = allowed && contains(dns, name);
  if (!allowed) return invalid("CSR names must be " + describeRule(rule) + "; got " + got);

  std::vector<std::string> sorted = dns;
  std::sort(sorted.begin(), sorted.end());
  if (auto twice = std::adjacent_find(sorted.begin(), sorted.end()); twice != sorted.end()) {
    return invalid("CSR lists " + *twice + " more than once");
  }
  std::vector<std::string> names = rule.required;
  for (const std::string& name : rule.optional) {
    if (contains(dns, name)) names.push_back(name);
  }
  return names;
}

Result<CsrInfo> checkCsr(std::string_view pem, const NameRule& rule) {
  Result<std::vector<uint8_t>> der = csrDerFromPem(pem);
  if (!der.ok()) return der.error();
  const unsigned char* cursor = der->data();
  X509ReqPtr request(d2i_X509_REQ(nullptr, &cursor, static_cast<long>(der->size())));
  if (request == nullptr) {
    ERR_clear_error();
    return invalid("CSR is not a valid PKCS#10 certificate request");
  }
  if (cursor != der->data() + der->size()) return invalid("CSR has bytes after the request");
  if (X509_REQ_get_version(request.get()) != X509_REQ_VERSION_1) {
    return invalid("CSR version must be 1");
  }

  EVP_PKEY* key = X509_REQ_get0_pubkey(request.get());
  const Result<KeyFacts> keyFacts = checkKey(key);
  if (!keyFacts.ok()) return keyFacts.error();
  if (Status status = checkSignature(request.get(), key); !status.ok()) return status.error();

  const Result<X509ExtensionsPtr> extensions = requestedExtensions(request.get());
  if (!extensions.ok()) return extensions.error();
  const Result<GeneralNamesPtr> san = checkExtensions(extensions->get());
  if (!san.ok()) return san.error();
  if (Status status = checkSubject(request.get(), rule.required.front()); !status.ok()) {
    return status.error();
  }
  Result<std::vector<std::string>> names = matchNames(san->get(), rule);
  if (!names.ok()) return names.error();

  CsrInfo info;
  info.names = std::move(names).value();
  info.keyType = keyFacts->type;
  info.keyBits = keyFacts->bits;
  info.derSha256Hex = crypto::toHex(crypto::sha256(std::span<const uint8_t>(*der)));
  return info;
}

}  // namespace

const char* csrKeyTypeName(CsrKeyType type) {
  switch (type) {
    case CsrKeyType::kEcdsaP256:
      return "ecdsa-p256";
    case CsrKeyType::kEcdsaP384:
      return "ecdsa-p384";
    case CsrKeyType::kRsa:
      return "rsa";
  }
  return "rsa";
}

Result<std::vector<uint8_t>> csrDerFromPem(std::string_view pem) {
  if (pem.size() > kMaxCsrPemSize) {
    return invalid("CSR is larger than " + std::to_string(kMaxCsrPemSize) + " bytes");
  }
  while (!pem.empty() && isSpace(pem.front())) pem.remove_prefix(1);
  while (!pem.empty() && isSpace(pem.back())) pem.remove_suffix(1);
  if (pem.empty()) return invalid("CSR is empty");

  std::vector<std::string_view> lines;
  for (size_t start = 0; start <= pem.size();) {
    const size_t end = std::min(pem.find('\n', start), pem.size());
    std::string_view line = pem.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }
  if (!lines.front().starts_with("-----BEGIN ")) {
    return invalid("CSR is not PEM: it must start with " + std::string(kBeginLine));
  }
  if (lines.front() != kBeginLine) {
    return invalid("CSR must be a PEM block labelled CERTIFICATE REQUEST; got " +
                   quotedValue(lines.front()));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].starts_with("-----BEGIN")) return invalid("CSR holds more than one PEM block");
  }
  if (lines.size() < 2 || lines.back() != kEndLine) {
    return invalid("CSR must end with " + std::string(kEndLine) +
                   " and hold nothing after it but whitespace");
  }
  std::string body;
  for (size_t i = 1; i + 1 < lines.size(); ++i) body += lines[i];
  std::optional<std::vector<uint8_t>> der = base64::decode(body);
  if (!der) return invalid("CSR PEM body is not valid base64 (or has PEM headers)");
  if (der->empty()) return invalid("CSR PEM block is empty");
  return std::move(*der);
}

Result<CsrInfo> checkTunnelCsr(std::string_view pem, std::string_view tunnelId,
                               std::string_view domain) {
  const std::string id = lowercase(tunnelId);
  if (!isValidTunnelId(id)) return invalid("tunnel ID " + quotedValue(tunnelId) + " is not valid");
  const std::string host = id + "." + lowercase(domain);
  if (!isHostname(host) || host.size() + 2 > 253) {
    return invalid("domain " + quotedValue(domain) + " does not make a valid hostname");
  }
  return checkCsr(pem, NameRule{{host}, {"*." + host}});
}

Result<CsrInfo> checkServerCsr(std::string_view pem, std::string_view domain) {
  const std::string host = lowercase(domain);
  if (!isHostname(host))
    return invalid("domain " + quotedValue(domain) + " is not a valid hostname");
  return checkCsr(pem, NameRule{{host}, {}});
}

Result<CsrInfo> checkCsrForNames(std::string_view pem, const std::vector<std::string>& names) {
  bool valid = !names.empty() && isHostname(names.front());
  for (size_t i = 1; valid && i < names.size(); ++i) {
    const std::string_view name = names[i];
    valid = (isHostname(name) || (name.starts_with("*.") && isHostname(name.substr(2)))) &&
            std::count(names.begin(), names.end(), names[i]) == 1;
  }
  if (!valid) {
    return invalid(
        "names to issue for must be distinct lowercase hostnames, the first without a wildcard");
  }
  return checkCsr(pem, NameRule{names, {}});
}

}  // namespace ot::controld
