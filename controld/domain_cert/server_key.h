// The API domain's own key and CSR, made by controld when no TLS_CERT_FILE is configured: the key
// stays in the server_certificates row, the CSR goes to the configured issuer (and is checked
// with checkServerCsr like any other). Pure apart from drawing randomness; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ot::controld {

struct ServerKeyAndCsr {
  std::string keyPem;  // unencrypted PKCS#8 ("PRIVATE KEY"), ECDSA P-256
  std::string csrPem;  // CN=<domain>, subjectAltName DNS:<domain>, SHA-256
};

// A fresh P-256 key and a CSR for exactly {domain} (lowercased). kInvalid for a name that is not
// a hostname.
[[nodiscard]] Result<ServerKeyAndCsr> makeServerKeyAndCsr(std::string_view domain);

// A CSR signed with an existing key (PEM): CN = names.front(), subjectAltName = all of `names`
// as given. For renewing with the key already stored.
[[nodiscard]] Result<std::string> makeCsr(const std::vector<std::string>& names,
                                          std::string_view keyPem);

}  // namespace ot::controld
