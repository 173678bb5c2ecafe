// AdminService's TunnelUsage (otctl usage): the same windows, buckets and per-origin split as the
// API's GET /api/tunnel/{id}/usage (controld/api/usage_series.h), for an operator instead of the
// tunnel's owner. Two range scans of usage_hourly, bounded by the window.
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "controld/admin/admin_service.h"
#include "controld/api/usage_series.h"
#include "controld/store/tunnel_record.h"
#include "controld/store/usage_origin_store.h"

namespace ot::controld {
namespace {

// Fills `series` from the buckets; sums saturate as the API's do.
void fillSeries(const std::vector<UsageBucket>& buckets, av1::UsageSeries& series) {
  int64_t in = 0;
  int64_t out = 0;
  int64_t connections = 0;
  auto add = [](int64_t a, int64_t b) {
    int64_t sum = 0;
    return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<int64_t>::max() : sum;
  };
  for (const UsageBucket& bucket : buckets) {
    av1::UsageBucket* entry = series.add_buckets();
    entry->set_start_unix_ms(bucket.startMs);
    entry->set_bytes_in(bucket.bytesIn);
    entry->set_bytes_out(bucket.bytesOut);
    entry->set_connections(bucket.connections);
    in = add(in, bucket.bytesIn);
    out = add(out, bucket.bytesOut);
    connections = add(connections, bucket.connections);
  }
  series.set_bytes_in(in);
  series.set_bytes_out(out);
  series.set_connections(connections);
}

}  // namespace

grpc::Status AdminService::TunnelUsage(grpc::ServerContext*, const av1::TunnelUsageRequest* request,
                                       av1::TunnelUsageResponse* response) {
  const std::string& id = request->tunnel_id();
  if (!isValidTunnelId(id)) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "not a tunnel ID: \"" + id + "\""};
  }
  const auto period =
      request->range().empty() ? UsagePeriod::kDay : parseUsagePeriod(request->range());
  if (!period) return {grpc::StatusCode::INVALID_ARGUMENT, "range must be 24h or 30d"};
  auto loaded = context_.store->getTunnel(id);
  if (!loaded) return grpcStatus(loaded.error());
  if (!loaded->has_value()) return {grpc::StatusCode::NOT_FOUND, "no tunnel " + id};

  const UsageWindow window = usageWindow(*period, now());
  auto hours = context_.store->usageHours(id, window.fromMs, window.toMs);
  if (!hours) return grpcStatus(hours.error());
  std::vector<UsageOriginHour> originHours;
  if (UsageOriginStore* byOrigin = usageOriginRole(context_.store)) {
    auto read = byOrigin->usageOriginHours(id, window.fromMs, window.toMs);
    if (!read) return grpcStatus(read.error());
    originHours = std::move(*read);
  }

  response->set_tunnel_id(id);
  response->set_range(std::string(usagePeriodName(*period)));
  response->set_bucket_seconds(window.bucketMs / 1000);
  response->set_from_unix_ms(window.fromMs);
  response->set_to_unix_ms(window.toMs);
  fillSeries(usageBuckets(window, *hours), *response->mutable_total());
  for (const OriginUsage& origin : usageByOrigin(originHours)) {
    av1::UsageSeries* series = response->add_origins();
    series->set_origin(origin.origin);
    fillSeries(usageBuckets(window, origin.hours), *series);
  }
  return grpc::Status::OK;
}

}  // namespace ot::controld
