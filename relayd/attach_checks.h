// The order of an attach's checks after the parse (docs/protocol.md 4.1): the token, then the
// routes, then the certificate. The parse (common/bridge_control.h) counted the routes and checked
// the shapes and the token's syntax; it leaves invalid routes in AttachRequest::routeError, and
// these decide when that is answered: only once the token is known to be right, so a guesser
// learns nothing of the route rules and a bad route never spares a bad token its failure.
// Pure: no I/O, no clocks; loop thread or tests.
#pragma once

#include <optional>
#include <string>

#include "common/bridge_control.h"
#include "opentunnel/control/v1/control.pb.h"
#include "relayd/relay_metrics.h"
#include "relayd/tunnel_table.h"

namespace ot::relayd {

struct AttachRefusal {
  bridge::AttachErrorCode code = bridge::AttachErrorCode::kError;
  AttachOutcome outcome = AttachOutcome::kError;
  std::string message;

  bool operator==(const AttachRefusal&) const = default;
};

// From the cached record, while controld cannot decide: no record (or a deleted one) is `error`
// (retry later), then the credential (bad_token), the routes (invalid_route), the certificate
// (cert_not_ready). nullopt: allowed so far (the per-machine limits follow).
[[nodiscard]] std::optional<AttachRefusal> checkCachedAttach(const CachedRecord* record,
                                                             const bridge::AttachRequest& attach);

// What controld's answer means for this attach. relayd sends controld no routes when they are
// invalid, so controld checks the count and the token; any answer that says the token matched
// then becomes invalid_route here.
struct ControlVerdict {
  enum class Kind : uint8_t {
    kAllowed,   // go on with the per-machine limits
    kRefused,   // answer `refusal`
    kUseCache,  // controld could not decide: checkCachedAttach decides
  };
  Kind kind = Kind::kUseCache;
  AttachRefusal refusal;
};
[[nodiscard]] ControlVerdict controlVerdict(
    const ::opentunnel::control::v1::AuthorizeAttachResponse& response,
    const bridge::AttachRequest& attach);

}  // namespace ot::relayd
