#include "otctl/output.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <ctime>

namespace ot::otctl {

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {
  for (Column& column : columns_) column.width = std::max(column.width, column.header.size());
}

void Table::row(const std::vector<std::string>& cells) {
  if (rows_ == 0) {
    std::vector<std::string> headers;
    for (const Column& column : columns_) headers.push_back(column.header);
    print(headers);
  }
  ++rows_;
  print(cells);
}

void Table::print(const std::vector<std::string>& cells) const {
  std::string line;
  for (size_t i = 0; i < cells.size() && i < columns_.size(); ++i) {
    std::string cell = cells[i];
    if (i + 1 < cells.size()) cell.resize(std::max(cell.size(), columns_[i].width), ' ');
    line += cell;
    if (i + 1 < cells.size()) line += "  ";
  }
  std::printf("%s\n", line.c_str());
}

std::string toJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  options.always_print_enums_as_ints = false;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

void JsonArray::item(const std::string& json) {
  std::printf("%s%s", open_ ? ",\n" : "[\n", json.c_str());
  open_ = true;
}

void JsonArray::end() {
  std::printf("%s]\n", open_ ? "\n" : "[");
  open_ = false;
}

std::string formatTime(int64_t unixMs) {
  if (unixMs <= 0) return "-";
  const std::time_t seconds = unixMs / 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::optional<int64_t> parseDuration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  int64_t unitMs = 1000;  // plain seconds
  const char last = text.back();
  if (last < '0' || last > '9') {
    if (last == 'd') {
      unitMs = 24LL * 3600 * 1000;
    } else if (last == 'h') {
      unitMs = 3600LL * 1000;
    } else if (last == 'm') {
      unitMs = 60LL * 1000;
    } else if (last != 's') {
      return std::nullopt;
    }
    text.remove_suffix(1);
  }
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size() || value < 0 ||
      value > INT64_MAX / unitMs) {
    return std::nullopt;
  }
  return value * unitMs;
}

}  // namespace ot::otctl
