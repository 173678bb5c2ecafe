// The .proto files ot_proto compiles, by the names server reflection serves them under.
// Calling protoFilesForReflection() (once, anywhere in a binary that serves reflection) also keeps
// every file's descriptor in protobuf's generated pool: ot_proto is a static library, so an object
// nothing references by name is left out of the link, and nothing references grpc.health.v1 when
// grpc++'s default health service answers it. Without it grpcurl could not describe Health.
#pragma once

#include <string_view>
#include <vector>

#include "grpc/health/v1/health.pb.h"
#include "opentunnel/admin/v1/admin.pb.h"
#include "opentunnel/control/v1/control.pb.h"

namespace ot {

// The names point into protobuf's generated pool, which lives as long as the process.
[[nodiscard]] inline std::vector<std::string_view> protoFilesForReflection() {
  return {
      opentunnel::control::v1::RelayMessage::descriptor()->file()->name(),
      opentunnel::admin::v1::StatsRequest::descriptor()->file()->name(),
      grpc::health::v1::HealthCheckRequest::descriptor()->file()->name(),
  };
}

}  // namespace ot
