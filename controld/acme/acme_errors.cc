#include "controld/acme/acme_errors.h"

namespace ot::controld {
namespace {

constexpr std::string_view kAcmePrefix = "urn:ietf:params:acme:error:";

}  // namespace

const char* acmeReasonLabel(AcmeReason reason) {
  switch (reason) {
    case AcmeReason::kNetwork:
      return "network";
    case AcmeReason::kTimeout:
      return "timeout";
    case AcmeReason::kHttp5xx:
      return "http_5xx";
    case AcmeReason::kHttp429:
      return "http_429";
    case AcmeReason::kBadBody:
      return "bad_body";
    case AcmeReason::kNonce:
      return "nonce";
    case AcmeReason::kBadNonce:
      return "bad_nonce";
    case AcmeReason::kAuthzPending:
      return "authz_pending";
    case AcmeReason::kDns:
      return "dns";
    case AcmeReason::kRejected:
      return "rejected";
    case AcmeReason::kConfig:
    case AcmeReason::kOther:
      return "other";
  }
  return "other";
}

FailureClass acmeReasonClass(AcmeReason reason) {
  switch (reason) {
    case AcmeReason::kNetwork:
    case AcmeReason::kTimeout:
    case AcmeReason::kHttp5xx:
    case AcmeReason::kHttp429:
    case AcmeReason::kBadBody:
    case AcmeReason::kNonce:
    case AcmeReason::kBadNonce:
    case AcmeReason::kAuthzPending:
    case AcmeReason::kDns:
      return FailureClass::kTransient;
    case AcmeReason::kRejected:
    case AcmeReason::kConfig:
      return FailureClass::kPermanent;
    case AcmeReason::kOther:
      return FailureClass::kOther;
  }
  return FailureClass::kOther;
}

AcmeReason reasonForStatus(int httpStatus) {
  if (httpStatus == 429) return AcmeReason::kHttp429;
  if (httpStatus >= 500) return AcmeReason::kHttp5xx;
  return AcmeReason::kOther;
}

AcmeReason reasonForProblem(std::string_view type, int httpStatus) {
  if (type.substr(0, kAcmePrefix.size()) == kAcmePrefix) {
    const std::string_view name = type.substr(kAcmePrefix.size());
    if (name == "badNonce") return AcmeReason::kBadNonce;
    if (name == "rateLimited") return AcmeReason::kHttp429;
    if (name == "serverInternal") return AcmeReason::kHttp5xx;
    if (name == "rejectedIdentifier" || name == "badCSR" || name == "unsupportedIdentifier" ||
        name == "badSignatureAlgorithm" || name == "unsupportedContact" ||
        name == "invalidContact") {
      return AcmeReason::kRejected;
    }
  }
  return reasonForStatus(httpStatus);
}

Error toError(const AcmeError& error) {
  ErrorKind kind = ErrorKind::kInternal;
  switch (acmeReasonClass(error.reason)) {
    case FailureClass::kTransient:
      kind = error.reason == AcmeReason::kTimeout ? ErrorKind::kTimeout : ErrorKind::kUnavailable;
      break;
    case FailureClass::kPermanent:
      kind = ErrorKind::kInvalid;
      break;
    case FailureClass::kOther:
      kind = ErrorKind::kInternal;
      break;
  }
  return Error{kind, error.message};
}

FailureDetail toFailureDetail(const AcmeError& error) {
  FailureDetail detail;
  detail.failure = acmeReasonClass(error.reason);
  detail.reason = acmeReasonLabel(error.reason);
  switch (error.reason) {
    case AcmeReason::kNetwork:
    case AcmeReason::kTimeout:
    case AcmeReason::kHttp5xx:
    case AcmeReason::kBadBody:
    case AcmeReason::kNonce:
    case AcmeReason::kBadNonce:
      detail.pointsAtCa = true;
      break;
    default:
      break;
  }
  detail.rateLimited = error.reason == AcmeReason::kHttp429;
  detail.retryAfterMs = error.retryAfterMs;
  detail.httpStatus = error.httpStatus;
  return detail;
}

}  // namespace ot::controld
