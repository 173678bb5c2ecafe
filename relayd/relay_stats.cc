#include "relayd/relay_stats.h"

#include <google/protobuf/util/message_differencer.h>

#include <cmath>
#include <string>

namespace ot::relayd {
namespace {

namespace v1 = ::opentunnel::control::v1;

// Metric values are doubles; counts are whole and never negative.
uint64_t count(double value) {
  return value > 0 ? static_cast<uint64_t>(std::llround(value)) : 0;
}

}  // namespace

v1::RelayStats readRelayStats(const RelayMetrics& metrics) {
  v1::RelayStats out;
  out.set_visitor_connections_open(count(metrics.visitorConnectionsOpen.Value()));
  out.set_bridges_attached(count(metrics.bridgesAttached.Value()));
  auto& visitors = *out.mutable_visitor_connections();
  for (size_t i = 0; i < static_cast<size_t>(VisitorOutcome::kCount); ++i) {
    visitors[std::string(visitorOutcomeName(static_cast<VisitorOutcome>(i)))] =
        count(metrics.visitors[i]->Value());
  }
  auto& failures = *out.mutable_forward_failures();
  for (size_t i = 0; i < static_cast<size_t>(ForwardFailure::kCount); ++i) {
    failures[std::string(forwardFailureName(static_cast<ForwardFailure>(i)))] =
        count(metrics.forwardFailures[i]->Value());
  }
  out.set_mesh_lookups_hit(count(metrics.meshLookupHit.Value()));
  out.set_mesh_lookups_miss(count(metrics.meshLookupMiss.Value()));
  return out;
}

bool sameRelayStats(const v1::RelayStats& a, const v1::RelayStats& b) {
  // Every field, maps by content: a field added later is compared without a change here.
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

}  // namespace ot::relayd
