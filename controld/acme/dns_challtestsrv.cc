#include "controld/acme/dns_challtestsrv.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/curl_http.h"
#include "common/text.h"

namespace ot::controld {
namespace {

std::string fqdn(const std::string& name) {
  std::string host = toLower(name);
  while (!host.empty() && host.back() == '.') host.pop_back();
  return host + ".";
}

}  // namespace

ChalltestsrvDns::ChalltestsrvDns(std::string managementUrl, int64_t timeoutMs)
    : url_(std::move(managementUrl)), timeoutMs_(timeoutMs) {
  while (!url_.empty() && url_.back() == '/') url_.pop_back();
}

Status ChalltestsrvDns::post(const std::string& path, const std::string& body) {
  http::CurlRequest request;
  request.method = "POST";
  request.url = url_ + path;
  request.body = body;
  request.headers = {"Content-Type: application/json"};
  request.connectTimeoutMs = timeoutMs_;
  request.totalTimeoutMs = timeoutMs_;
  auto reply = http::performCurl(request);
  if (!reply)
    return Error{reply.error().kind, "challtestsrv " + path + ": " + reply.error().message};
  if (reply->status != 200) {
    const ErrorKind kind = reply->status >= 500 ? ErrorKind::kUnavailable : ErrorKind::kInvalid;
    return Error{kind, "challtestsrv " + path + " answered HTTP " + std::to_string(reply->status)};
  }
  return Ok{};
}

Result<TxtRecord> ChalltestsrvDns::createTxt(const std::string& name, const std::string& value) {
  const std::string host = fqdn(name);
  const std::lock_guard lock(mutex_);
  const nlohmann::json body = {{"host", host}, {"value", value}};
  const Status added = post("/set-txt", body.dump());
  if (!added) return added.error();
  values_[host].push_back(value);
  TxtRecord record;
  record.name = host.substr(0, host.size() - 1);
  record.value = value;
  return record;
}

Status ChalltestsrvDns::deleteTxt(const TxtRecord& record) {
  const std::string host = fqdn(record.name);
  const std::lock_guard lock(mutex_);
  const nlohmann::json body = {{"host", host}};
  const Status cleared = post("/clear-txt", body.dump());
  if (!cleared) return cleared;
  auto it = values_.find(host);
  if (it == values_.end()) return Ok{};
  std::vector<std::string>& kept = it->second;
  const auto found = std::find(kept.begin(), kept.end(), record.value);
  if (found != kept.end()) kept.erase(found);
  for (const std::string& value : kept) {
    const nlohmann::json again = {{"host", host}, {"value", value}};
    const Status added = post("/set-txt", again.dump());
    if (!added) return added;
  }
  if (kept.empty()) values_.erase(it);
  return Ok{};
}

Result<std::vector<TxtRecord>> ChalltestsrvDns::listChallengeRecords(const std::string&) {
  return std::vector<TxtRecord>{};
}

}  // namespace ot::controld
