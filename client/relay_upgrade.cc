#include "client/relay_upgrade.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/curl_http.h"
#include "common/websocket_handshake.h"

namespace ot::client {
namespace {

HttpParserLimits responseLimits() {
  HttpParserLimits limits;
  limits.maxBodyBytes = 64 * 1024;  // error bodies are small JSON
  return limits;
}

}  // namespace

RelayUpgrade::RelayUpgrade(std::string request, std::string key)
    : request_(std::move(request)),
      key_(std::move(key)),
      parser_(HttpParser::Kind::kResponse, responseLimits()) {}

std::optional<RelayUpgrade> RelayUpgrade::create(std::string_view domain, std::string_view path,
                                                 std::string_view userAgent,
                                                 std::span<const uint8_t, 16> nonce) {
  const ws::HttpHeader extra[] = {{"User-Agent", userAgent}};
  auto handshake = ws::buildClientRequest(
      domain, path, nonce, userAgent.empty() ? ws::HeaderList{} : ws::HeaderList(extra));
  if (!handshake) return std::nullopt;
  return RelayUpgrade(std::move(handshake->request), std::move(handshake->key));
}

RelayUpgrade::Step RelayUpgrade::feed(std::span<const uint8_t> bytes) {
  const HttpParseResult result = parser_.feed(bytes);
  Step step;
  step.consumed = result.consumed;
  switch (result.status) {
    case HttpParseStatus::kNeedMore:
    case HttpParseStatus::kHeaders:
    case HttpParseStatus::kBody:
      return step;
    case HttpParseStatus::kDone:
      return refused();
    case HttpParseStatus::kError:
      // A refusal's status is what matters, not a body we would not read.
      if (parser_.headersComplete() && parser_.message().status != 101) return refused();
      step.outcome = Outcome::kFailed;
      step.failure.text = "bad HTTP answer to the upgrade: " + std::string(parser_.errorDetail());
      return step;
    case HttpParseStatus::kUpgrade:
      break;
  }
  const HttpMessage& message = parser_.message();
  std::vector<ws::HttpHeader> headers;
  headers.reserve(message.headers.size());
  for (const HttpHeader& header : message.headers) headers.push_back({header.name, header.value});
  const ws::ResponseError error = ws::checkUpgradeResponse(message.status, headers, key_);
  if (error != ws::ResponseError::kNone) {
    step.outcome = Outcome::kFailed;
    step.failure.text = "bad upgrade answer: " + std::string(ws::responseErrorName(error));
    return step;
  }
  step.outcome = Outcome::kUpgraded;
  return step;
}

RelayUpgrade::Step RelayUpgrade::finish() {
  const HttpParseResult result = parser_.finish();
  if (result.status == HttpParseStatus::kDone) return refused();
  Step step;
  step.outcome = Outcome::kFailed;
  step.failure.text = "the relay closed the connection before answering the upgrade";
  return step;
}

RelayUpgrade::Step RelayUpgrade::refused() const {
  const HttpMessage& message = parser_.message();
  Step step;
  step.outcome = Outcome::kFailed;
  std::string detail;
  const auto body = nlohmann::json::parse(message.body, nullptr, false);
  if (body.is_object()) {
    if (auto it = body.find("_tag"); it != body.end() && it->is_string()) {
      step.failure.tag = it->get<std::string>();
    }
    if (auto it = body.find("message"); it != body.end() && it->is_string()) {
      detail = it->get<std::string>();
    }
  }
  step.failure.httpStatus = message.status == 101 ? 0 : message.status;
  AttemptEnd end;
  end.cause = AttemptEnd::Cause::kUpgradeRefused;
  end.httpStatus = step.failure.httpStatus;
  if (const auto retryAfter = message.header("retry-after")) {
    // "0" still says "come back": count it as the shortest wait.
    if (const auto ms = http::parseRetryAfterMs(*retryAfter, unixNowMs()))
      end.retryAfterMs = std::max<uint64_t>(1, static_cast<uint64_t>(*ms));
  }
  step.failure.retry = classifyAttemptEnd(end);
  step.failure.text = "upgrade refused: HTTP " + std::to_string(message.status);
  if (!step.failure.tag.empty()) step.failure.text += " " + step.failure.tag;
  if (!detail.empty()) step.failure.text += ": " + detail;
  return step;
}

}  // namespace ot::client
