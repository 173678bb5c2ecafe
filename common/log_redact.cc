#include "common/log_redact.h"

namespace ot::log {
namespace {

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool isSecretKey(std::string_view key) {
  std::string lowered;
  for (const char c : key) lowered.push_back(lower(c));
  for (const std::string_view word : {"pass", "pwd", "secret", "token"}) {
    if (lowered.find(word) != std::string::npos) return true;
  }
  return false;
}

bool isParameterSeparator(char c) {
  return c == ' ' || c == ';' || c == '&' || c == '?' || c == '#';
}

// Replaces the value of every secret-looking key=value parameter with "***".
std::string redactParameters(std::string_view text) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t eq = text.find('=', pos);
    if (eq == std::string_view::npos) break;
    size_t keyStart = eq;
    while (keyStart > pos && !isParameterSeparator(text[keyStart - 1])) --keyStart;
    size_t valueEnd = eq + 1;
    if (valueEnd < text.size() && (text[valueEnd] == '\'' || text[valueEnd] == '"')) {
      // A quoted value ("password='a b'") runs to its closing quote, or to the end.
      const size_t close = text.find(text[valueEnd], valueEnd + 1);
      valueEnd = close == std::string_view::npos ? text.size() : close + 1;
    } else {
      while (valueEnd < text.size() && !isParameterSeparator(text[valueEnd])) ++valueEnd;
    }
    out.append(text.substr(pos, eq + 1 - pos));
    if (isSecretKey(text.substr(keyStart, eq - keyStart))) {
      out.append("***");
    } else {
      out.append(text.substr(eq + 1, valueEnd - eq - 1));
    }
    pos = valueEnd;
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace

std::string redactUrl(std::string_view url) {
  const size_t schemeEnd = url.find("://");
  if (schemeEnd == std::string_view::npos) {
    // "user:pass@host/db" without a scheme: nothing like a parameter list, so treat as userinfo.
    const size_t at = url.rfind('@', url.find_first_of("?#"));
    if (url.find('=') == std::string_view::npos && at != std::string_view::npos) {
      return std::string(url.substr(at + 1));
    }
    return redactParameters(url);
  }
  const size_t restStart = schemeEnd + 3;
  const size_t queryStart = url.find_first_of("?#", restStart);
  const std::string_view beforeQuery =
      url.substr(restStart, queryStart == std::string_view::npos ? std::string_view::npos
                                                                 : queryStart - restStart);
  const size_t at = beforeQuery.rfind('@');
  std::string out(url.substr(0, restStart));
  if (at == std::string_view::npos) {
    out.append(beforeQuery);
  } else {
    out.append(beforeQuery.substr(at + 1));
  }
  if (queryStart != std::string_view::npos) out.append(redactParameters(url.substr(queryStart)));
  return out;
}

}  // namespace ot::log
