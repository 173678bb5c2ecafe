#include "common/analytics/analytics_event.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "common/log_format.h"

namespace ot::analytics {
namespace {

using nlohmann::ordered_json;

ordered_json envelope(const Event& event, const Origin& origin, std::string_view id) {
  ordered_json out;
  out["v"] = kSchemaVersion;
  out["id"] = id;
  out["type"] = event.type;
  out["time"] = formatTime(event.atUnixMs);
  out["machine"] = origin.machine;
  out["region"] = origin.region;
  out["source"] = origin.source;
  if (!event.tunnel.empty()) out["tunnel"] = event.tunnel;
  ordered_json data = ordered_json::object();
  for (const Field& field : event.fields) {
    std::visit([&](const auto& value) { data[std::string(field.name)] = value; }, field.value);
  }
  out["data"] = std::move(data);
  return out;
}

std::string dump(const ordered_json& value) {
  return value.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

}  // namespace

Event& Event::add(std::string_view name, int64_t number) {
  Field& field = fields.emplace_back();
  field.name = name;
  field.value.emplace<int64_t>(number);
  return *this;
}

Event& Event::add(std::string_view name, bool flag) {
  Field& field = fields.emplace_back();
  field.name = name;
  field.value.emplace<bool>(flag);
  return *this;
}

Event& Event::add(std::string_view name, std::string text) {
  Field& field = fields.emplace_back();
  field.name = name;
  field.value.emplace<std::string>(std::move(text));
  return *this;
}

std::string formatTime(int64_t unixMs) {
  return log::formatTimestamp(std::chrono::system_clock::time_point(
      std::chrono::milliseconds(std::max<int64_t>(unixMs, 0))));
}

std::string encodeEvent(const Event& event, const Origin& origin, std::string_view id) {
  return dump(envelope(event, origin, id));
}

std::string encodeBatch(std::span<const Event> events, const Origin& origin,
                        std::string_view idPrefix, uint64_t firstSequence) {
  ordered_json batch = ordered_json::array();
  uint64_t sequence = firstSequence;
  for (const Event& event : events) {
    batch.push_back(
        envelope(event, origin, std::string(idPrefix) + "-" + std::to_string(sequence++)));
  }
  return dump(batch);
}

}  // namespace ot::analytics
