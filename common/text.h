// Small ASCII text helpers shared by the parsers, config readers and HTTP code. ASCII on purpose:
// protocol tokens, header names, hostnames and flag values are ASCII, and the result must not
// depend on the process locale.
#pragma once

#include <string>
#include <string_view>

namespace ot {

[[nodiscard]] constexpr char asciiLower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

// Same length and the same letters ignoring ASCII case ("Upgrade" == "upgrade").
[[nodiscard]] bool equalsIgnoreCase(std::string_view a, std::string_view b);
// `text` begins with `prefix`, ignoring ASCII case.
[[nodiscard]] bool startsWithIgnoreCase(std::string_view text, std::string_view prefix);
// A copy with A-Z folded to a-z; other bytes unchanged.
[[nodiscard]] std::string toLower(std::string_view text);

// Without leading and trailing ASCII whitespace (space, \t, \n, \v, \f, \r).
[[nodiscard]] std::string_view trim(std::string_view text);
// Without leading and trailing HTTP optional whitespace (space and \t only, RFC 9110 5.6.3).
[[nodiscard]] std::string_view trimOws(std::string_view text);

}  // namespace ot
