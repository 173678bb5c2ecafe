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
#include "controld/store/usage_origin_store.h"

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

// {"buckets": [...], "total": {...}} of one series.
Json seriesJson(const std::vector<UsageBucket>& series) {
  Json buckets = Json::array();
  int64_t in = 0;
  int64_t out = 0;
  int64_t connections = 0;
  for (const UsageBucket& bucket : series) {
    Json entry = {{"start", timeText(bucket.startMs)}};
    entry.update(countsJson(bucket.bytesIn, bucket.bytesOut, bucket.connections));
    buckets.push_back(std::move(entry));
    in = saturatingAdd(in, bucket.bytesIn);
    out = saturatingAdd(out, bucket.bytesOut);
    connections = saturatingAdd(connections, bucket.connections);
  }
  return Json{{"buckets", std::move(buckets)}, {"total", countsJson(in, out, connections)}};
}

ApiResponse usage(TunnelService& service, const UsageApi& api, const ApiRequest& request,
                  const PathParams& params) {
  auto view = service.getTunnel(params.get("id"), bearerToken(request));
  if (!view) return serviceErrorResponse(view.error());
  // `range` is the same parameter under the name otctl uses (--range); `period` wins.
  auto periodText = queryValue(request.query, "period");
  if (!periodText) periodText = queryValue(request.query, "range");
  const auto period = periodText ? parseUsagePeriod(*periodText) : UsagePeriod::kDay;
  if (!period) return ApiResponse::error(400, "BadRequestError", "period must be 24h or 30d");

  const int64_t now = api.nowMs ? api.nowMs() : unixNowMs();
  const UsageWindow window = usageWindow(*period, now);
  auto hours = api.store->usageHours(view->record.id, window.fromMs, window.toMs);
  if (!hours) return ApiResponse::error(503, "ServiceUnavailableError", "storage unavailable");
  std::vector<UsageOriginHour> originHours;
  if (UsageOriginStore* byOrigin = usageOriginRole(api.store)) {
    auto read = byOrigin->usageOriginHours(view->record.id, window.fromMs, window.toMs);
    if (!read) return ApiResponse::error(503, "ServiceUnavailableError", "storage unavailable");
    originHours = std::move(*read);
  }

  Json origins = Json::array();
  for (const OriginUsage& origin : usageByOrigin(originHours)) {
    Json series = seriesJson(usageBuckets(window, origin.hours));
    origins.push_back(Json{{"origin", origin.origin},
                           {"buckets", std::move(series["buckets"])},
                           {"total", std::move(series["total"])}});
  }
  Json body = {{"id", view->record.id},
               {"period", usagePeriodName(*period)},
               {"bucketSeconds", window.bucketMs / 1000},
               {"from", timeText(window.fromMs)},
               {"to", timeText(window.toMs)}};
  body.update(seriesJson(usageBuckets(window, *hours)));
  body["origins"] = std::move(origins);
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
  Json origin = {{"type", "object"},
                 {"required", {"origin", "buckets", "total"}},
                 {"properties",
                  {{"origin", {{"type", "string"}, {"description", "The origin's name."}}},
                   {"buckets",
                    {{"type", "array"},
                     {"description", "The origin's share of each bucket above, in the same order."},
                     {"items", bucket}}},
                   {"total", counts}}}};
  return Json{
      {"type", "object"},
      {"required", {"id", "period", "bucketSeconds", "from", "to", "buckets", "total", "origins"}},
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
        {"total", counts},
        {"origins",
         {{"type", "array"},
          {"description",
           "The same usage split by the named origin whose link carried it, by name; only "
           "origins with usage in the window. Usage of unnamed clients is in the tunnel's "
           "figures only: the tunnel's total minus the origins' totals."},
          {"items", origin}}}}}};
}

RouteDoc usageDoc() {
  RouteDoc doc;
  doc.operationId = "getUsage";
  doc.summary = "Read recent usage";
  doc.description =
      "The tunnel's traffic over the last 24 hours in hourly buckets (?period=24h, the default) "
      "or the last 30 days in daily UTC buckets (?period=30d), the current bucket included; "
      "?range= is accepted as another name for period. The same buckets follow per named "
      "origin (origins). Usage is counted when a visitor connection ends and reaches the "
      "database within about 20 seconds.";
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
