#include "controld/acme/dns_cloudflare.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>

#include "common/clock.h"
#include "common/curl_http.h"
#include "common/text.h"

namespace ot::controld {
namespace {

using nlohmann::json;

// Cloudflare's error codes that the provider acts on.
constexpr int kRecordDoesNotExist = 81044;
constexpr int kRecordAlreadyExists = 81057;
constexpr int kIdenticalRecordExists = 81058;
constexpr int kMaxPages = 10'000;  // a bound on a list that keeps claiming more pages
// Cloudflare's answers are small JSON pages; a runaway answer fails the call, not the process.
constexpr std::size_t kMaxBodyBytes = 16 * 1024 * 1024;

std::string withoutTrailingDot(std::string name) {
  while (!name.empty() && name.back() == '.') name.pop_back();
  return name;
}

bool endsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string stringField(const json& object, const char* key) {
  if (!object.is_object()) return {};
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return {};
  return it->get<std::string>();
}

// Cloudflare may hand TXT content back quoted ("\"value\""); the challenge value is inside.
std::string unquote(std::string content) {
  if (content.size() >= 2 && content.front() == '"' && content.back() == '"') {
    content = content.substr(1, content.size() - 2);
  }
  return content;
}

std::optional<TxtRecord> recordFrom(const json& object) {
  if (!object.is_object()) return std::nullopt;
  TxtRecord record;
  record.id = stringField(object, "id");
  record.name = withoutTrailingDot(stringField(object, "name"));
  record.value = unquote(stringField(object, "content"));
  record.createdUnixMs = parseRfc3339Ms(stringField(object, "created_on"));
  if (record.id.empty() || record.name.empty()) return std::nullopt;
  return record;
}

bool parseDigits(const std::string& text, size_t pos, size_t count, int& out) {
  if (pos + count > text.size()) return false;
  out = 0;
  for (size_t i = pos; i < pos + count; ++i) {
    if (std::isdigit(static_cast<unsigned char>(text[i])) == 0) return false;
    out = out * 10 + (text[i] - '0');
  }
  return true;
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
int64_t daysFromCivil(int64_t year, int64_t month, int64_t day) {
  year -= month <= 2 ? 1 : 0;
  const int64_t era = (year >= 0 ? year : year - 399) / 400;
  const int64_t yoe = year - era * 400;
  const int64_t doy = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

}  // namespace

int64_t cloudflareRetryDelayMs(int retry, std::optional<int64_t> retryAfterMs, int64_t baseMs,
                               int64_t capMs) {
  if (retryAfterMs) return std::clamp<int64_t>(*retryAfterMs, 0, capMs);
  int64_t delay = baseMs;
  for (int i = 1; i < retry && delay < capMs; ++i) delay *= 2;
  return std::min(capMs, delay);
}

int64_t parseRfc3339Ms(const std::string& text) {
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!parseDigits(text, 0, 4, year) || text.size() < 19 || text[4] != '-' ||
      !parseDigits(text, 5, 2, month) || text[7] != '-' || !parseDigits(text, 8, 2, day) ||
      (text[10] != 'T' && text[10] != 't' && text[10] != ' ') || !parseDigits(text, 11, 2, hour) ||
      text[13] != ':' || !parseDigits(text, 14, 2, minute) || text[16] != ':' ||
      !parseDigits(text, 17, 2, second)) {
    return 0;
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return 0;
  }
  size_t pos = 19;
  int64_t millis = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int64_t scale = 100;
    const size_t start = pos;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])) != 0) {
      millis += (text[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
    if (pos == start) return 0;
  }
  int64_t offsetMinutes = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    int offHour = 0, offMinute = 0;
    if (!parseDigits(text, pos + 1, 2, offHour) || pos + 3 >= text.size() || text[pos + 3] != ':' ||
        !parseDigits(text, pos + 4, 2, offMinute)) {
      return 0;
    }
    offsetMinutes = (text[pos] == '+' ? 1 : -1) * (offHour * 60 + offMinute);
    pos += 6;
  } else {
    return 0;
  }
  if (pos != text.size()) return 0;
  const int64_t days = daysFromCivil(year, month, day);
  const int64_t seconds = days * 86400 + hour * 3600 + minute * 60 + second - offsetMinutes * 60;
  return seconds * 1000 + millis;
}

struct CloudflareDns::Reply {
  long status = 0;
  json body;  // discarded when the body is not JSON
  std::vector<int> codes;
  std::string errors;  // "code: message; ..." for error messages
  [[nodiscard]] bool hasCode(int code) const {
    return std::find(codes.begin(), codes.end(), code) != codes.end();
  }
};

CloudflareDns::CloudflareDns(CloudflareOptions options) : options_(std::move(options)) {
  while (!options_.apiUrl.empty() && options_.apiUrl.back() == '/') options_.apiUrl.pop_back();
  if (options_.pageSize < 1) options_.pageSize = 100;
  if (options_.maxAttempts < 1) options_.maxAttempts = 1;
}

Result<CloudflareDns::Reply> CloudflareDns::call(const std::string& method,
                                                 const std::string& pathAndQuery,
                                                 const std::string& body) {
  http::CurlRequest request;
  request.method = method;
  request.url = options_.apiUrl + "/zones/" + http::percentEncode(options_.zoneId) + pathAndQuery;
  request.body = body;
  request.headers = {"Authorization: Bearer " + options_.apiToken, "Accept: application/json"};
  if (!body.empty()) request.headers.emplace_back("Content-Type: application/json");
  request.connectTimeoutMs = options_.connectTimeoutMs;
  request.totalTimeoutMs = options_.totalTimeoutMs;
  request.maxBodyBytes = kMaxBodyBytes;
  for (int attempt = 1;; ++attempt) {
    Result<http::CurlReply> sent = http::performCurl(request);
    std::optional<int64_t> retryAfterMs;
    if (!sent) {
      // A timeout already took up to total_timeout_ms; trying again would triple the wait.
      if (sent.error().kind == ErrorKind::kTimeout || attempt >= options_.maxAttempts) {
        return Error{sent.error().kind, "Cloudflare " + method + ": " + sent.error().message};
      }
    } else {
      Reply reply;
      reply.status = sent->status;
      reply.body = json::parse(sent->body, nullptr, false);
      if (reply.body.is_object()) {
        const auto errors = reply.body.find("errors");
        if (errors != reply.body.end() && errors->is_array()) {
          for (const json& item : *errors) {
            if (!item.is_object()) continue;
            const auto code = item.find("code");
            const int number =
                code != item.end() && code->is_number_integer() ? code->get<int>() : 0;
            reply.codes.push_back(number);
            if (!reply.errors.empty()) reply.errors += "; ";
            reply.errors += std::to_string(number) + ": " + stringField(item, "message");
          }
        }
      }
      const bool retryable = reply.status == 429 || reply.status >= 500;
      if (!retryable) return reply;
      if (attempt >= options_.maxAttempts) {
        return Error{ErrorKind::kUnavailable,
                     "Cloudflare " + method + " answered HTTP " + std::to_string(reply.status) +
                         " " + std::to_string(attempt) + " times" +
                         (reply.errors.empty() ? "" : " (" + reply.errors + ")")};
      }
      retryAfterMs = http::parseRetryAfterMs(sent->header("retry-after"), unixNowMs());
    }
    const int64_t delay = cloudflareRetryDelayMs(attempt, retryAfterMs, options_.backoffBaseMs,
                                                 options_.retryAfterCapMs);
    if (options_.sleepMs) {
      options_.sleepMs(delay);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    }
  }
}

namespace {

// Turns a non-2xx reply (after retries) into an error; 2xx without success:true is unreadable.
Error replyError(long status, const std::string& errors, const std::string& what) {
  const std::string detail = what + " answered HTTP " + std::to_string(status) +
                             (errors.empty() ? "" : " (" + errors + ")");
  if (status >= 200 && status < 300) {
    return Error{ErrorKind::kUnavailable, what + " gave an unreadable answer"};
  }
  return Error{ErrorKind::kInvalid, detail};
}

bool succeeded(long status, const json& body) {
  if (status < 200 || status >= 300 || !body.is_object()) return false;
  const auto success = body.find("success");
  return success != body.end() && success->is_boolean() && success->get<bool>();
}

}  // namespace

Result<TxtRecord> CloudflareDns::createTxt(const std::string& name, const std::string& value) {
  const std::string fqdn = withoutTrailingDot(name);
  const json request = {{"type", "TXT"}, {"name", fqdn}, {"content", value}, {"ttl", 60}};
  auto reply = call("POST", "/dns_records", request.dump());
  if (!reply) return reply.error();
  if (reply->hasCode(kIdenticalRecordExists) || reply->hasCode(kRecordAlreadyExists)) {
    auto existing = findExact(fqdn, value);
    if (!existing) return existing.error();
    if (!existing->empty()) return existing->front();
  }
  if (!succeeded(reply->status, reply->body)) {
    return replyError(reply->status, reply->errors, "Cloudflare create TXT " + fqdn);
  }
  auto record = recordFrom(reply->body["result"]);
  if (!record) return Error{ErrorKind::kUnavailable, "Cloudflare create TXT: no record in answer"};
  return *record;
}

Status CloudflareDns::deleteTxt(const TxtRecord& record) {
  if (record.id.empty()) return Error{ErrorKind::kInvalid, "Cloudflare delete: record has no ID"};
  auto reply = call("DELETE", "/dns_records/" + http::percentEncode(record.id), "");
  if (!reply) return reply.error();
  if (reply->status == 404 || reply->hasCode(kRecordDoesNotExist)) return Ok{};
  if (!succeeded(reply->status, reply->body)) {
    return replyError(reply->status, reply->errors, "Cloudflare delete TXT " + record.name);
  }
  return Ok{};
}

Result<std::vector<TxtRecord>> CloudflareDns::findExact(const std::string& name,
                                                        const std::string& value) {
  auto reply = call("GET",
                    "/dns_records?type=TXT&name=" + http::percentEncode(name) +
                        "&content=" + http::percentEncode(value) +
                        "&per_page=" + std::to_string(options_.pageSize),
                    "");
  if (!reply) return reply.error();
  if (!succeeded(reply->status, reply->body) || !reply->body["result"].is_array()) {
    return replyError(reply->status, reply->errors, "Cloudflare find TXT " + name);
  }
  std::vector<TxtRecord> found;
  for (const json& item : reply->body["result"]) {
    auto record = recordFrom(item);
    if (record && toLower(record->name) == toLower(name) && record->value == value) {
      found.push_back(*record);
    }
  }
  return found;
}

Result<std::vector<TxtRecord>> CloudflareDns::listChallengeRecords(const std::string& domain) {
  const std::string suffix = "." + toLower(withoutTrailingDot(domain));
  if (suffix.size() < 2) return Error{ErrorKind::kInvalid, "Cloudflare list: no domain"};
  const std::string prefix = "_acme-challenge.";
  std::vector<TxtRecord> records;
  for (int page = 1; page <= kMaxPages; ++page) {
    auto reply = call("GET",
                      "/dns_records?type=TXT&name.startswith=" + http::percentEncode(prefix) +
                          "&name.endswith=" + http::percentEncode(suffix) + "&per_page=" +
                          std::to_string(options_.pageSize) + "&page=" + std::to_string(page),
                      "");
    if (!reply) return reply.error();
    if (!succeeded(reply->status, reply->body) || !reply->body["result"].is_array()) {
      return replyError(reply->status, reply->errors, "Cloudflare list TXT");
    }
    const json& result = reply->body["result"];
    for (const json& item : result) {
      auto record = recordFrom(item);
      if (!record) continue;
      const std::string name = toLower(record->name);
      if (name.rfind(prefix, 0) == 0 && endsWith(name, suffix)) records.push_back(*record);
    }
    int64_t totalPages = 0;
    const json& info = reply->body["result_info"];
    if (info.is_object() && info.contains("total_pages") &&
        info["total_pages"].is_number_integer()) {
      totalPages = info["total_pages"].get<int64_t>();
    }
    // Without result_info, a short page is the last one.
    const bool shortPage = result.size() < static_cast<size_t>(options_.pageSize);
    if (result.empty() || (totalPages > 0 ? page >= totalPages : shortPage)) break;
  }
  return records;
}

}  // namespace ot::controld
