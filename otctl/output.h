// otctl's output: aligned text tables for people, JSON for scripts, and the small formats both
// share (times, durations). Tables are printed as rows arrive, so a list of 100,000 tunnels is
// never held: the column widths are the header's and the given minimums, and a longer cell only
// pushes its own row.
#pragma once

#include <google/protobuf/message.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ot::otctl {

class Table {
 public:
  struct Column {
    std::string header;
    size_t width = 0;  // at least the header's
  };
  explicit Table(std::vector<Column> columns);
  // The header line, once, before the first row.
  void row(const std::vector<std::string>& cells);
  [[nodiscard]] size_t rows() const { return rows_; }

 private:
  void print(const std::vector<std::string>& cells) const;
  std::vector<Column> columns_;
  size_t rows_ = 0;
};

// A message as one line of JSON, field names as in the .proto, every field present.
[[nodiscard]] std::string toJson(const google::protobuf::Message& message);

// Lists printed as one JSON array, streamed: "[" before the first item, "," between, "]" at the
// end, so the output parses as a whole however long it is.
class JsonArray {
 public:
  void item(const std::string& json);
  void end();

 private:
  bool open_ = false;
};

// "2026-12-02T16:30:00Z", or "-" for 0.
[[nodiscard]] std::string formatTime(int64_t unixMs);
// "14d", "36h", "90m", "45s" or plain seconds, as milliseconds; nullopt when not one of those.
[[nodiscard]] std::optional<int64_t> parseDuration(std::string_view text);

}  // namespace ot::otctl
