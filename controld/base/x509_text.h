// How values from certificates and requests are quoted in error messages. The messages reach logs
// and API answers while the values come from whoever sent the request, so everything is made
// printable and short. Pure; any thread.
#pragma once

#include <openssl/asn1.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <string>
#include <string_view>

namespace ot::controld {

// Printable ASCII as it is, any other byte (and the backslash) as \xNN, cut after 100 bytes.
[[nodiscard]] std::string quotedValue(std::string_view raw);

// The bytes of an ASN.1 string, unchecked (may hold NULs or anything else).
[[nodiscard]] std::string_view asn1Text(const ASN1_STRING* string);

// The short or long name OpenSSL knows for the object, else its dotted OID.
[[nodiscard]] std::string objectName(const ASN1_OBJECT* object);

// RFC 2253 form ("O=Evil,CN=abc.example.com"), or "an empty subject".
[[nodiscard]] std::string describeName(const X509_NAME* name);

// A subjectAltName entry: the DNS name itself, else "IP:192.0.2.1", "email:...", "URI:...", ...
[[nodiscard]] std::string describeGeneralName(const GENERAL_NAME* name);

}  // namespace ot::controld
