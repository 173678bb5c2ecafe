#include "controld/base/x509_text.h"

#include <openssl/err.h>

#include <array>
#include <cstdint>
#include <span>

#include "controld/base/openssl_util.h"

namespace ot::controld {
namespace {

constexpr size_t kMaxQuotedBytes = 100;

std::string describeIp(std::span<const uint8_t> address) {
  std::string out = "IP:";
  if (address.size() == 4) {
    for (size_t i = 0; i < 4; ++i) out += (i ? "." : "") + std::to_string(address[i]);
    return out;
  }
  if (address.size() == 16) {  // written out in full: no "::" shortening
    static constexpr char kHex[] = "0123456789abcdef";
    for (size_t i = 0; i < 16; i += 2) {
      if (i > 0) out.push_back(':');
      for (const uint8_t byte : {address[i], address[i + 1]}) {
        out.push_back(kHex[byte >> 4]);
        out.push_back(kHex[byte & 0xf]);
      }
    }
    return out;
  }
  return out + "(" + std::to_string(address.size()) + " bytes)";
}

}  // namespace

std::string quotedValue(std::string_view raw) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : raw.substr(0, kMaxQuotedBytes)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f && c != '\\') {
      out.push_back(c);
    } else {
      out += "\\x";
      out.push_back(kHex[byte >> 4]);
      out.push_back(kHex[byte & 0xf]);
    }
  }
  if (raw.size() > kMaxQuotedBytes) out += "...";
  return out;
}

std::string_view asn1Text(const ASN1_STRING* string) {
  const std::span<const uint8_t> bytes = bytesOf(string);
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

std::string objectName(const ASN1_OBJECT* object) {
  std::array<char, 128> text{};
  if (OBJ_obj2txt(text.data(), static_cast<int>(text.size()), object, 0) <= 0) {
    ERR_clear_error();
    return "an unknown object";
  }
  return quotedValue(text.data());
}

std::string describeName(const X509_NAME* name) {
  if (X509_NAME_entry_count(name) == 0) return "an empty subject";
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253) < 0) {
    ERR_clear_error();
    return "a subject that cannot be printed";
  }
  return quotedValue(readAll(bio.get()));
}

std::string describeGeneralName(const GENERAL_NAME* name) {
  switch (name->type) {
    case GEN_DNS:
      return quotedValue(asn1Text(name->d.dNSName));
    case GEN_IPADD:
      return describeIp(bytesOf(name->d.iPAddress));
    case GEN_EMAIL:
      return "email:" + quotedValue(asn1Text(name->d.rfc822Name));
    case GEN_URI:
      return "URI:" + quotedValue(asn1Text(name->d.uniformResourceIdentifier));
    case GEN_DIRNAME:
      return "DirName:" + describeName(name->d.directoryName);
    case GEN_RID:
      return "RID:" + objectName(name->d.registeredID);
    case GEN_OTHERNAME:
      return "othername:" + objectName(name->d.otherName->type_id);
    default:
      return "a non-DNS name";
  }
}

}  // namespace ot::controld
