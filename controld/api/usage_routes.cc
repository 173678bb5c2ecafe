#include "controld/api/usage_routes.h"

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/log_format.h"
#include "controld/api/api_routes.h"
#include "controld/api/usage_series.h"

namespace ot::controld {
namespace {

using Json = nlohmann::ordered_json;

std::string timeText(int64_t ms) {
  return log::formatTimestamp(std::chrono::system_clock::time_point(std::chrono::milliseconds(ms)));
}

// Each bucket is at most INT64_MAX already; the totals of 30 of them could overflow.
int64_t saturatingAdd(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? std::numeric_limits<int64_t>::max() : sum;
}

Json countsJson(int64_t bytesIn, int64_t bytesOut, int64_t connections) {
  return Json{{"bytesIn", bytesIn}, {"bytesOut", bytesOut}, {"connections", connections}};
}

ApiResponse usage(TunnelService& service, const UsageApi& api, const ApiRequest& request,
                  const PathParams& params) {
  auto view = service.getTunnel(params.get("id"), bearerToken(request));
  if (!view) return serviceErrorResponse(view.error());
  const auto periodText = queryValue(request.query, "period");
  const auto period = periodText ? parseUsagePeriod(*periodText) : UsagePeriod::kDay;
  if (!period) return ApiResponse::error(400, "BadRequestError", "period must be 24h or 30d");

  const int64_t now = api.nowMs ? api.nowMs() : unixNowMs();
  const UsageWindow window = usageWindow(*period, now);
  auto hours = api.store->usageHours(view->record.id, window.fromMs, window.toMs);
  if (!hours) return ApiResponse::error(503, "ServiceUnavailableError", "storage unavailable");

  Json buckets = Json::array();
  int64_t in = 0;
  int64_t out = 0;
  int64_t connections = 0;
  for (const UsageBucket& bucket : usageBuckets(window, *hours)) {
    Json entry = {{"start", timeText(bucket.startMs)}};
    entry.update(countsJson(bucket.bytesIn, bucket.bytesOut, bucket.connections));
    buckets.push_back(std::move(entry));
    in = saturatingAdd(in, bucket.bytesIn);
    out = saturatingAdd(out, bucket.bytesOut);
    connections = saturatingAdd(connections, bucket.connections);
  }
  Json body = {{"id", view->record.id},
               {"period", usagePeriodName(*period)},
               {"bucketSeconds", window.bucketMs / 1000},
               {"from", timeText(window.fromMs)},
               {"to", timeText(window.toMs)},
               {"buckets", std::move(buckets)},
               {"total", countsJson(in, out, connections)}};
  return ApiResponse::json(200, body.dump(-1, ' ', false, Json::error_handler_t::replace));
}

Json usageSchema() {
  auto integer = [](const char* description) {
    return Json{{"type", "integer"}, {"format", "int64"}, {"description", description}};
  };
  Json counts = {{"type", "object"},
                 {"required", {"bytesIn", "bytesOut", "connections"}},
                 {"properties",
                  {{"bytesIn", integer("Bytes from visitors to the client.")},
                   {"bytesOut", integer("Bytes from the client to visitors.")},
                   {"connections", integer("Visitor connections that ended in the bucket.")}}}};
  Json bucket = counts;
  bucket["required"].insert(bucket["required"].begin(), "start");
  bucket["properties"]["start"] = {{"type", "string"},
                                   {"format", "date-time"},
                                   {"description", "The bucket's start (an hour, or a UTC day)."}};
  return Json{
      {"type", "object"},
      {"required", {"id", "period", "bucketSeconds", "from", "to", "buckets", "total"}},
      {"properties",
       {{"id", {{"type", "string"}, {"description", "The tunnel's ID."}}},
        {"period", {{"type", "string"}, {"enum", {"24h", "30d"}}}},
        {"bucketSeconds", integer("3600 for 24h, 86400 for 30d.")},
        {"from", {{"type", "string"}, {"format", "date-time"}, {"description", "First bucket."}}},
        {"to",
         {{"type", "string"}, {"format", "date-time"}, {"description", "End of the last one."}}},
        {"buckets",
         {{"type", "array"},
          {"description", "Oldest first; every bucket of the window, empty ones as zeros."},
          {"items", bucket}}},
        {"total", counts}}}};
}

RouteDoc usageDoc() {
  RouteDoc doc;
  doc.operationId = "getUsage";
  doc.summary = "Read recent usage";
  doc.description =
      "The tunnel's traffic over the last 24 hours in hourly buckets (?period=24h, the default) "
      "or the last 30 days in daily UTC buckets (?period=30d), the current bucket included. "
      "Usage is counted when a visitor connection ends and reaches the database within about "
      "20 seconds.";
  doc.tag = "tunnels";
  doc.bearerAuth = true;
  doc.parameters = {{"id", "The tunnel's ID: the first label of its hostname."}};
  doc.responses = {
      {200, "The usage.", "Usage", {}},
      {400, "period is neither 24h nor 30d.", "Error", {}},
      {401, "No bearer token, or not this tunnel's token.", "Error", {"WWW-Authenticate"}},
      {404, "No such tunnel (never created, or deleted).", "Error", {}},
      {503, "Storage is unavailable; retry.", "Error", {}}};
  return doc;
}

}  // namespace

void addUsageRoutes(ApiRouter& router, TunnelService& service, const UsageApi& api) {
  if (api.store == nullptr) return;
  router.addSchema("Usage", usageSchema());
  TunnelService* s = &service;
  router.add({"GET", "/api/tunnel/{id}/usage", usageDoc(),
              [s, api](const ApiRequest& r, const PathParams& p) { return usage(*s, api, r, p); }});
}

}  // namespace ot::controld
