#include "relayd/attach_checks.h"

#include <utility>

namespace ot::relayd {
namespace {

namespace v1 = ::opentunnel::control::v1;
using bridge::AttachErrorCode;

AttachRefusal refusal(AttachErrorCode code, AttachOutcome outcome, std::string message) {
  return AttachRefusal{code, outcome, std::move(message)};
}

AttachRefusal invalidRoutes(const bridge::AttachRequest& attach) {
  return refusal(AttachErrorCode::kInvalidRoute, AttachOutcome::kInvalidRoute, attach.routeError);
}

}  // namespace

std::optional<AttachRefusal> checkCachedAttach(const CachedRecord* record,
                                               const bridge::AttachRequest& attach) {
  if (record == nullptr || record->deleted) {
    return refusal(AttachErrorCode::kError, AttachOutcome::kError,
                   "the control plane is unavailable; retry");
  }
  if (!TunnelTable::credentialMatches(*record, attach.token, attach.origin)) {
    return refusal(AttachErrorCode::kBadToken, AttachOutcome::kBadToken, "bad token");
  }
  if (!attach.routeError.empty()) return invalidRoutes(attach);
  if (!record->certReady) {
    return refusal(AttachErrorCode::kCertNotReady, AttachOutcome::kCertNotReady,
                   "the certificate is not issued yet");
  }
  return std::nullopt;
}

ControlVerdict controlVerdict(const v1::AuthorizeAttachResponse& response,
                              const bridge::AttachRequest& attach) {
  using Kind = ControlVerdict::Kind;
  const std::string& message = response.message();
  auto refuse = [&](AttachErrorCode code, AttachOutcome outcome, const char* fallback) {
    return ControlVerdict{Kind::kRefused,
                          refusal(code, outcome, message.empty() ? fallback : message)};
  };
  switch (response.result()) {
    case v1::ATTACH_RESULT_BAD_TOKEN:
      return refuse(AttachErrorCode::kBadToken, AttachOutcome::kBadToken, "bad token");
    case v1::ATTACH_RESULT_OK:
    case v1::ATTACH_RESULT_CERT_NOT_READY:
    case v1::ATTACH_RESULT_INVALID_ROUTE:
    case v1::ATTACH_RESULT_TOO_MANY_ROUTES:
    case v1::ATTACH_RESULT_ROUTE_CONFLICT:
      // The token matched: the routes come next.
      if (!attach.routeError.empty()) return ControlVerdict{Kind::kRefused, invalidRoutes(attach)};
      break;
    default:
      // controld could not decide (its storage is down, say): the cached record decides, as
      // while controld itself is away.
      return ControlVerdict{Kind::kUseCache, {}};
  }
  switch (response.result()) {
    case v1::ATTACH_RESULT_OK:
      return ControlVerdict{Kind::kAllowed, {}};
    case v1::ATTACH_RESULT_CERT_NOT_READY:
      return refuse(AttachErrorCode::kCertNotReady, AttachOutcome::kCertNotReady,
                    "the certificate is not issued yet");
    case v1::ATTACH_RESULT_INVALID_ROUTE:
      return refuse(AttachErrorCode::kInvalidRoute, AttachOutcome::kInvalidRoute, "invalid route");
    case v1::ATTACH_RESULT_TOO_MANY_ROUTES:
      return refuse(AttachErrorCode::kTooManyRoutes, AttachOutcome::kTooManyRoutes,
                    "too many routes");
    default:
      return refuse(AttachErrorCode::kRouteConflict, AttachOutcome::kRouteConflict,
                    "route conflict");
  }
}

}  // namespace ot::relayd
