// How a failed ACME step is classified, so the job machinery knows whether to retry it soon
// (transient), never (permanent) or a few times (other), what to count, and whether it points at
// the CA (the cool-down). Pure: no I/O.
//
//  - transient: timeouts, connection trouble, 5xx, 429 / rateLimited, bodies that are not JSON,
//    nonce trouble (none handed out, badNonce after the retries), an authorization still pending;
//  - permanent: rejectedIdentifier, badCSR, unsupportedIdentifier, missing configuration;
//  - other: everything else (an authorization that ended invalid, unauthorized, ...).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "common/result.h"
#include "controld/issuance/issuer.h"

namespace ot::controld {

enum class AcmeReason {
  kNetwork,
  kTimeout,
  kHttp5xx,
  kHttp429,
  kBadBody,
  kNonce,
  kBadNonce,
  kAuthzPending,
  kDns,
  kRejected,
  kConfig,  // missing or unusable configuration: permanent, counted as "other"
  kOther,
};
// The opentunnel_acme_failures_total class label.
[[nodiscard]] const char* acmeReasonLabel(AcmeReason reason);
[[nodiscard]] FailureClass acmeReasonClass(AcmeReason reason);

struct AcmeError {
  AcmeReason reason = AcmeReason::kOther;
  std::string message;  // includes the problem document or the start of the body
  int httpStatus = 0;
  int64_t retryAfterMs = 0;
  std::string problemType;  // "urn:ietf:params:acme:error:..." when the CA sent one
};

// The reason for an ACME problem document's type (with the HTTP status as a fallback).
[[nodiscard]] AcmeReason reasonForProblem(std::string_view type, int httpStatus);
// For an HTTP answer that is not a problem document.
[[nodiscard]] AcmeReason reasonForStatus(int httpStatus);

// The issuer-facing forms: an ot::Error (kind from the class) and the detail for the runner.
[[nodiscard]] Error toError(const AcmeError& error);
[[nodiscard]] FailureDetail toFailureDetail(const AcmeError& error);

// Result<T> with an AcmeError, so the reason travels up through the ACME steps.
template <typename T>
using AcmeResult = Result<T, AcmeError>;
using AcmeStatus = AcmeResult<Ok>;

[[nodiscard]] inline AcmeError acmeError(AcmeReason reason, std::string message) {
  AcmeError error;
  error.reason = reason;
  error.message = std::move(message);
  return error;
}

}  // namespace ot::controld
