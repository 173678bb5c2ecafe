// Certificate issuers. A job runner asks an Issuer for a certificate for names it has already
// checked (the tunnel's own names, or the API domain); the local CA answers at once, ACME (a later
// issue) runs an order. Implementations are called from worker threads and may block.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "controld/issuance/job_policy.h"

namespace ot::controld {

struct IssueRequest {
  std::string csrPem;              // already validated: CN and SANs are exactly `names`
  std::vector<std::string> names;  // e.g. {"abc.example.com", "*.abc.example.com"}
};

struct IssuedCertificate {
  std::string chainPem;  // leaf first, then intermediates; the root is not included
  int64_t notBeforeMs = 0;
  int64_t notAfterMs = 0;
};

// What an issuer knows about a failed attempt beyond Error::kind: how the job machinery should
// treat it and what to count. The default (issueDetailed's base version) derives it from the kind.
struct FailureDetail {
  FailureClass failure = FailureClass::kOther;
  // opentunnel_acme_failures_total's class label: network, timeout, http_5xx, http_429,
  // bad_body, nonce, bad_nonce, authz_pending, dns, rejected, other.
  const char* reason = "other";
  bool pointsAtCa = false;   // counts toward the CA cool-down (network, 5xx, nonce trouble...)
  bool rateLimited = false;  // the CA said 429 / rateLimited
  int64_t retryAfterMs = 0;  // the CA's Retry-After, 0 when it gave none
  int httpStatus = 0;        // of an ACME error response, 0 otherwise
};
[[nodiscard]] FailureDetail failureDetailFromKind(ErrorKind kind);

class Issuer {
 public:
  virtual ~Issuer() = default;
  // `cancel` turns true when the process shuts down or the job's lease is lost; a long-running
  // issuer checks it between steps and returns kUnavailable.
  virtual Result<IssuedCertificate> issue(const IssueRequest& request,
                                          const std::atomic<bool>& cancel) = 0;
  // issue() plus what is known about a failure (set only when it fails). The job runner calls
  // this one; issuers that know more than the error kind (ACME) override it.
  virtual Result<IssuedCertificate> issueDetailed(const IssueRequest& request,
                                                  const std::atomic<bool>& cancel,
                                                  FailureDetail& detail) {
    auto issued = issue(request, cancel);
    if (!issued) detail = failureDetailFromKind(issued.error().kind);
    return issued;
  }
  [[nodiscard]] virtual const char* name() const = 0;
};

}  // namespace ot::controld
