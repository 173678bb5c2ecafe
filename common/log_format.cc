#include "common/log_format.h"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "common/text.h"

namespace ot::log {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// One step through UTF-8 per Unicode table 3-7: the length of a well-formed sequence, or of the
// maximal ill-formed subpart (at least one byte), which becomes a single U+FFFD.
struct Utf8Step {
  size_t length;
  bool valid;
};

Utf8Step nextUtf8(std::string_view s, size_t pos) {
  const auto lead = static_cast<uint8_t>(s[pos]);
  if (lead < 0x80) return {1, true};
  size_t trailing = 0;
  uint8_t low = 0x80;
  uint8_t high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    trailing = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    trailing = 2;
    if (lead == 0xE0) low = 0xA0;   // overlong
    if (lead == 0xED) high = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    trailing = 3;
    if (lead == 0xF0) low = 0x90;   // overlong
    if (lead == 0xF4) high = 0x8F;  // above U+10FFFF
  } else {
    return {1, false};
  }
  for (size_t i = 1; i <= trailing; ++i) {
    if (pos + i >= s.size()) return {i, false};
    const auto byte = static_cast<uint8_t>(s[pos + i]);
    if (byte < low || byte > high) return {i, false};
    low = 0x80;
    high = 0xBF;
  }
  return {trailing + 1, true};
}

void appendHexByte(std::string& out, std::string_view prefix, uint8_t byte, bool fourDigits) {
  static constexpr char kDigits[] = "0123456789abcdef";
  out.append(prefix);
  if (fourDigits) out.append("00");
  out.push_back(kDigits[byte >> 4]);
  out.push_back(kDigits[byte & 0x0f]);
}

// Copies `text` with invalid UTF-8 replaced; every ASCII byte goes through `escape`, which
// appends it in whatever form the output format needs.
template <typename Escape>
void appendSanitized(std::string& out, std::string_view text, Escape escape) {
  size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Step step = nextUtf8(text, pos);
    if (!step.valid) {
      out.append(kReplacement);
    } else if (step.length == 1) {
      escape(out, text[pos]);
    } else {
      out.append(text.substr(pos, step.length));
    }
    pos += step.length;
  }
}

void escapeJsonChar(std::string& out, char c) {
  switch (c) {
    case '"':
      out.append("\\\"");
      break;
    case '\\':
      out.append("\\\\");
      break;
    case '\b':
      out.append("\\b");
      break;
    case '\f':
      out.append("\\f");
      break;
    case '\n':
      out.append("\\n");
      break;
    case '\r':
      out.append("\\r");
      break;
    case '\t':
      out.append("\\t");
      break;
    default:
      if (static_cast<uint8_t>(c) < 0x20) {
        appendHexByte(out, "\\u", static_cast<uint8_t>(c), true);
      } else {
        out.push_back(c);
      }
  }
}

// Text lines: control characters are made visible so a record never spans lines. Backslashes
// and quotes are escaped only inside quoted values, where they would otherwise be ambiguous.
void escapeTextChar(std::string& out, char c, bool quoted) {
  switch (c) {
    case '\n':
      out.append("\\n");
      break;
    case '\r':
      out.append("\\r");
      break;
    case '\t':
      out.append("\\t");
      break;
    case '"':
      out.append(quoted ? "\\\"" : "\"");
      break;
    case '\\':
      out.append(quoted ? "\\\\" : "\\");
      break;
    default: {
      const auto byte = static_cast<uint8_t>(c);
      if (byte < 0x20 || byte == 0x7f) {
        appendHexByte(out, "\\x", byte, false);
      } else {
        out.push_back(c);
      }
    }
  }
}

void appendJsonString(std::string& out, std::string_view text) {
  out.push_back('"');
  appendSanitized(out, text, escapeJsonChar);
  out.push_back('"');
}

void appendDouble(std::string& out, double number) {
  std::array<char, 32> buffer{};
  const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), number);
  out.append(buffer.data(), result.ptr);
}

template <typename Integer>
void appendInteger(std::string& out, Integer number) {
  std::array<char, 24> buffer{};
  const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), number);
  out.append(buffer.data(), result.ptr);
}

bool needsQuotes(std::string_view text) {
  if (text.empty()) return true;
  for (const char c : text) {
    const auto byte = static_cast<uint8_t>(c);
    if (byte <= 0x20 || byte == 0x7f || c == '"' || c == '=' || c == '\\') return true;
  }
  return false;
}

void appendTextValue(std::string& out, const Value& value) {
  std::visit(
      [&out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string_view>) {
          const bool quoted = needsQuotes(v);
          if (quoted) out.push_back('"');
          appendSanitized(out, v,
                          [quoted](std::string& o, char c) { escapeTextChar(o, c, quoted); });
          if (quoted) out.push_back('"');
        } else if constexpr (std::is_same_v<T, bool>) {
          out.append(v ? "true" : "false");
        } else if constexpr (std::is_same_v<T, double>) {
          appendDouble(out, v);
        } else {
          appendInteger(out, v);
        }
      },
      value.get());
}

void appendJsonValue(std::string& out, const Value& value) {
  std::visit(
      [&out](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string_view>) {
          appendJsonString(out, v);
        } else if constexpr (std::is_same_v<T, bool>) {
          out.append(v ? "true" : "false");
        } else if constexpr (std::is_same_v<T, double>) {
          if (std::isnan(v)) {
            out.append("\"NaN\"");
          } else if (std::isinf(v)) {
            out.append(v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
          } else {
            appendDouble(out, v);
          }
        } else {
          appendInteger(out, v);
        }
      },
      value.get());
}

// Field names come from our code, but a stray space or '=' must not break the key=value shape.
void appendTextName(std::string& out, std::string_view name) {
  if (name.empty()) {
    out.push_back('_');
    return;
  }
  for (const char c : name) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '_' || c == '.' || c == '-';
    out.push_back(plain ? c : '_');
  }
}

bool isReservedJsonKey(std::string_view name) {
  return name == "timestamp" || name == "level" || name == "message" || name == "target";
}

std::string_view upperLevelName(Level level) {
  switch (level) {
    case Level::kTrace:
      return "TRACE";
    case Level::kDebug:
      return "DEBUG";
    case Level::kInfo:
      return "INFO";
    case Level::kWarn:
      return "WARN";
    case Level::kError:
      return "ERROR";
    case Level::kCritical:
      return "CRITICAL";
    case Level::kOff:
      return "OFF";
  }
  return "UNKNOWN";
}

}  // namespace

std::optional<Format> parseFormat(std::string_view name) {
  if (equalsIgnoreCase(name, "text")) return Format::kText;
  if (equalsIgnoreCase(name, "json")) return Format::kJson;
  return std::nullopt;
}

std::optional<Level> parseLevel(std::string_view name) {
  if (equalsIgnoreCase(name, "trace")) return Level::kTrace;
  if (equalsIgnoreCase(name, "debug")) return Level::kDebug;
  if (equalsIgnoreCase(name, "info")) return Level::kInfo;
  if (equalsIgnoreCase(name, "warn") || equalsIgnoreCase(name, "warning")) return Level::kWarn;
  if (equalsIgnoreCase(name, "error")) return Level::kError;
  if (equalsIgnoreCase(name, "critical")) return Level::kCritical;
  if (equalsIgnoreCase(name, "off")) return Level::kOff;
  return std::nullopt;
}

std::string_view levelName(Level level) {
  switch (level) {
    case Level::kTrace:
      return "trace";
    case Level::kDebug:
      return "debug";
    case Level::kInfo:
      return "info";
    case Level::kWarn:
      return "warn";
    case Level::kError:
      return "error";
    case Level::kCritical:
      return "critical";
    case Level::kOff:
      return "off";
  }
  return "unknown";
}

std::string formatTimestamp(std::chrono::system_clock::time_point time) {
  using namespace std::chrono;
  const auto ms = floor<milliseconds>(time);
  const auto day = floor<days>(ms);
  const year_month_day date(day);
  const hh_mm_ss clock(ms - day);
  std::array<char, 40> buffer{};
  const int written = std::snprintf(
      buffer.data(), buffer.size(), "%04d-%02u-%02uT%02d:%02d:%02d.%03dZ",
      static_cast<int>(date.year()), static_cast<unsigned>(date.month()),
      static_cast<unsigned>(date.day()), static_cast<int>(clock.hours().count()),
      static_cast<int>(clock.minutes().count()), static_cast<int>(clock.seconds().count()),
      static_cast<int>(clock.subseconds().count()));
  if (written <= 0) return {};
  return std::string(buffer.data(), static_cast<size_t>(written));
}

std::string renderText(const Record& record) {
  std::string out = formatTimestamp(record.time);
  out.push_back(' ');
  out.append(upperLevelName(record.level));
  out.push_back(' ');
  if (!record.target.empty()) {
    appendSanitized(out, record.target,
                    [](std::string& o, char c) { escapeTextChar(o, c, false); });
    out.append(": ");
  }
  appendSanitized(out, record.message, [](std::string& o, char c) { escapeTextChar(o, c, false); });
  for (const auto fields : {record.fields, record.trailing}) {
    for (const Field& field : fields) {
      out.push_back(' ');
      appendTextName(out, field.name);
      out.push_back('=');
      appendTextValue(out, field.value);
    }
  }
  return out;
}

std::string renderJson(const Record& record) {
  std::string out = "{\"timestamp\":\"";
  out.append(formatTimestamp(record.time));
  out.append("\",\"level\":\"");
  out.append(levelName(record.level));
  out.append("\",\"message\":");
  appendJsonString(out, record.message);
  out.append(",\"target\":");
  appendJsonString(out, record.target);
  for (const auto fields : {record.fields, record.trailing}) {
    for (const Field& field : fields) {
      out.push_back(',');
      if (isReservedJsonKey(field.name)) {
        appendJsonString(out, "field_" + std::string(field.name));
      } else {
        appendJsonString(out, field.name);
      }
      out.push_back(':');
      appendJsonValue(out, field.value);
    }
  }
  out.push_back('}');
  return out;
}

}  // namespace ot::log
