// The API domain's certificate as PEM text: reading the leaf's validity, checking that a chain
// and a private key belong together (configured files, stored rows, freshly issued ones), and
// whether the leaf names a host. Pure: no I/O, no shared state; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"
#include "controld/relays/record_publisher.h"

namespace ot::controld {

struct CertificateValidity {
  int64_t notBeforeMs = 0;
  int64_t notAfterMs = 0;
};

// Of the first certificate in a PEM chain.
[[nodiscard]] Result<CertificateValidity> leafValidity(std::string_view chainPem);

// The chain (leaf first, at least one certificate, no other PEM blocks) and the private key
// (unencrypted PEM) parse, and the key is the leaf's. kInvalid otherwise.
[[nodiscard]] Result<ApiCertificatePem> checkApiCertificate(std::string_view chainPem,
                                                            std::string_view keyPem);

// The chain's leaf is valid for `host` (its SANs, wildcards as TLS clients match them).
[[nodiscard]] bool leafCoversHost(std::string_view chainPem, const std::string& host);

}  // namespace ot::controld
