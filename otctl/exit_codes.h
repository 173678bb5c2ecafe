// otctl's exit codes (docs/admin.md "Exit codes"): scripts branch on them.
#pragma once

#include <grpcpp/support/status.h>

namespace ot::otctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;       // the operation failed (controld answered an error)
inline constexpr int kExitUsage = 2;        // the command line, or an argument controld refused
inline constexpr int kExitNotFound = 3;     // no such tunnel or job
inline constexpr int kExitUnreachable = 4;  // controld cannot be reached, or refused the token

// A call's status as an exit code. Reaching controld is checked before the call (Client), so an
// UNAVAILABLE here is controld's own answer (its storage is down): the operation failed.
[[nodiscard]] inline int exitCodeOf(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::OK:
      return kExitOk;
    case grpc::StatusCode::NOT_FOUND:
      return kExitNotFound;
    case grpc::StatusCode::INVALID_ARGUMENT:
      return kExitUsage;
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return kExitUnreachable;
    default:
      return kExitFailed;
  }
}

}  // namespace ot::otctl
