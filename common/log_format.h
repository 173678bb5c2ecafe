// The pure half of logging: log records and how they become one line of text or JSON. No I/O and
// no global state, so every escape and quoting rule is tested directly; common/log.h feeds the
// rendered line to spdlog. Fields hold views: a Field lives only for the logging call that
// names it, which is what keeps `{"tunnel", id}` at call sites free of copies.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

namespace ot::log {

enum class Format { kText, kJson };
enum class Level { kTrace, kDebug, kInfo, kWarn, kError, kCritical, kOff };

// "text" / "json", any case (the LOG_FORMAT values).
[[nodiscard]] std::optional<Format> parseFormat(std::string_view name);
// trace, debug, info, warn (or warning), error, critical, off; any case (the LOG_LEVEL values).
[[nodiscard]] std::optional<Level> parseLevel(std::string_view name);
// "trace" .. "critical", "off": the JSON spelling; text lines use the upper case.
[[nodiscard]] std::string_view levelName(Level level);

// A field value: text, a signed or unsigned integer, a floating point number or a boolean.
// Constructors are implicit on purpose, so that `{"routes", 3}` and `{"tunnel", id}` just work.
class Value {
 public:
  using Variant = std::variant<std::string_view, int64_t, uint64_t, double, bool>;

  Value(std::string_view text) : value_(text) {}
  Value(const char* text) : value_(text == nullptr ? std::string_view() : std::string_view(text)) {}
  Value(const std::string& text) : value_(std::string_view(text)) {}
  Value(bool flag) : value_(flag) {}
  Value(double number) : value_(number) {}
  template <std::signed_integral T>
  requires(!std::same_as<T, char>) Value(T number) : value_(static_cast<int64_t>(number)) {}
  template <std::unsigned_integral T>
  requires(!std::same_as<T, bool> && !std::same_as<T, char>) Value(T number)
      : value_(static_cast<uint64_t>(number)) {}

  [[nodiscard]] const Variant& get() const { return value_; }

 private:
  Variant value_;
};

struct Field {
  std::string_view name;
  Value value;
};

struct Record {
  std::chrono::system_clock::time_point time{};
  Level level = Level::kInfo;
  std::string_view target{};
  std::string_view message{};
  std::span<const Field> fields{};
  // Process-wide fields (machine, region) written after the event's own.
  std::span<const Field> trailing{};
};

// RFC 3339 in UTC with milliseconds: 2026-11-30T01:02:03.456Z.
[[nodiscard]] std::string formatTimestamp(std::chrono::system_clock::time_point time);

// `2026-11-30T01:02:03.456Z INFO relayd.bridge: bridge attached tunnel=abc bridge=7`. Control
// characters are escaped and invalid UTF-8 becomes U+FFFD, so one record is always one line;
// values that are empty or hold spaces, quotes, '=', backslashes or control characters are
// quoted. No trailing newline (the sink adds it).
[[nodiscard]] std::string renderText(const Record& record);

// One JSON object: timestamp, level, message, target, then the fields in order. Strings are
// escaped and invalid UTF-8 is replaced, so every line parses. A field named like one of the four
// fixed keys is written as "field_<name>" rather than as a duplicate key. NaN and infinities,
// which JSON cannot carry as numbers, are written as the strings "NaN", "Infinity", "-Infinity".
[[nodiscard]] std::string renderJson(const Record& record);

}  // namespace ot::log
