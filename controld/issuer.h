// Certificate issuers. A job runner asks an Issuer for a certificate for names it has already
// checked (the tunnel's own names, or the API domain); the local CA answers at once, ACME (a later
// issue) runs an order. Implementations are called from worker threads and may block.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace ot::controld {

struct IssueRequest {
  std::string csr_pem;             // already validated: CN and SANs are exactly `names`
  std::vector<std::string> names;  // e.g. {"abc.example.com", "*.abc.example.com"}
};

struct IssuedCertificate {
  std::string chain_pem;  // leaf first, then intermediates; the root is not included
  int64_t not_before_ms = 0;
  int64_t not_after_ms = 0;
};

class Issuer {
 public:
  virtual ~Issuer() = default;
  // `cancel` turns true when the process shuts down or the job's lease is lost; a long-running
  // issuer checks it between steps and returns kUnavailable.
  virtual Result<IssuedCertificate> issue(const IssueRequest& request,
                                          const std::atomic<bool>& cancel) = 0;
  [[nodiscard]] virtual const char* name() const = 0;
};

}  // namespace ot::controld
