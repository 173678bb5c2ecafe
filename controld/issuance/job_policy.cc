#include "controld/issuance/job_policy.h"

#include <algorithm>
#include <cmath>

#include "controld/issuance/issuer.h"

namespace ot::controld {

const char* failureClassName(FailureClass failure) {
  switch (failure) {
    case FailureClass::kTransient:
      return "transient";
    case FailureClass::kPermanent:
      return "permanent";
    case FailureClass::kOther:
      return "other";
  }
  return "other";
}

FailureClass classifyFailure(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUnavailable:
    case ErrorKind::kTimeout:
      return FailureClass::kTransient;
    case ErrorKind::kInvalid:
      return FailureClass::kPermanent;
    case ErrorKind::kConflict:
    case ErrorKind::kNotFound:
    case ErrorKind::kInternal:
      return FailureClass::kOther;
  }
  return FailureClass::kOther;
}

FailureDetail failureDetailFromKind(ErrorKind kind) {
  FailureDetail detail;
  detail.failure = classifyFailure(kind);
  if (kind == ErrorKind::kTimeout) {
    detail.reason = "timeout";
  } else if (kind == ErrorKind::kUnavailable) {
    detail.reason = "network";
  }
  return detail;
}

int64_t retryDelayMs(const RetryPolicy& policy, int attempt, double jitter01) {
  const int64_t cap = std::max<int64_t>(1, policy.maxDelayMs);
  int64_t delay = std::clamp<int64_t>(policy.baseDelayMs, 1, cap);
  // Doubling stops at the cap, so a long run of attempts never overflows.
  for (int i = 1; i < attempt && delay < cap; ++i) delay = std::min(cap, delay * 2);
  const double jitter = std::isfinite(jitter01) ? std::clamp(jitter01, 0.0, 1.0) : 0.0;
  const double half = static_cast<double>(delay) / 2.0;
  const auto jittered = static_cast<int64_t>(std::llround(half + half * jitter));
  return std::clamp<int64_t>(jittered, 1, delay);
}

RetryDecision decideRetry(const RetryPolicy& policy, FailureClass failure, int attempts,
                          int64_t queuedAtMs, int64_t nowMs, double jitter01) {
  const int64_t next = nowMs + retryDelayMs(policy, attempts, jitter01);
  switch (failure) {
    case FailureClass::kPermanent:
      return {};
    case FailureClass::kTransient:
      if (next > queuedAtMs + policy.transientWindowMs) return {};
      return {true, next};
    case FailureClass::kOther:
      if (attempts >= policy.otherAttempts) return {};
      return {true, next};
  }
  return {};
}

namespace {

bool startsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

}  // namespace

std::string carryRequeuedMark(std::string_view previous, std::string_view message) {
  if (!startsWith(previous, kRequeuedMark) || message.empty() ||
      startsWith(message, kRequeuedMark)) {
    return std::string(message);
  }
  return std::string(kRequeuedMark) + std::string(message);
}

std::string requeuedErrorText(std::string_view failedLastError) {
  std::string_view error = failedLastError;
  if (startsWith(error, kTransientGiveUpMark)) error.remove_prefix(kTransientGiveUpMark.size());
  return std::string(kRequeuedMark) + std::string(error);
}

int64_t renewAtMs(int64_t notBeforeMs, int64_t notAfterMs) {
  const int64_t validity = std::max<int64_t>(0, notAfterMs - notBeforeMs);
  return notAfterMs - std::min(kRenewBeforeMs, validity / 3);
}

namespace {

std::string renewalPrefix(const CertificateInfo& certificate) {
  return certificate.id + ":renew:" + std::to_string(certificate.notAfterMs) + ":";
}

}  // namespace

std::string renewalJobId(const CertificateInfo& certificate, int64_t alarmAtMs) {
  return renewalPrefix(certificate) + std::to_string(alarmAtMs);
}

bool isRenewalOf(std::string_view jobId, const CertificateInfo& certificate) {
  if (certificate.id.empty()) return false;
  const std::string prefix = renewalPrefix(certificate);
  return jobId.size() > prefix.size() && jobId.substr(0, prefix.size()) == prefix;
}

}  // namespace ot::controld
