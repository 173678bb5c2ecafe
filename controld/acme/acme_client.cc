#include "controld/acme/acme_client.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "controld/acme/acme_jws.h"

namespace ot::controld {
namespace {

constexpr size_t kNoncePoolSize = 16;
constexpr int kNonceFetchAttempts = 3;
constexpr size_t kBodyExcerpt = 300;

bool looksLikeJson(const AcmeHttpResponse& response) {
  if (response.contentType.find("json") != std::string::npos) return true;
  const auto first = response.body.find_first_not_of(" \t\r\n");
  return first != std::string::npos && response.body[first] == '{';
}

std::string excerpt(const std::string& body) {
  return body.size() <= kBodyExcerpt ? body : body.substr(0, kBodyExcerpt) + "...";
}

}  // namespace

bool waitFor(int64_t ms, const std::atomic<bool>& cancel) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!cancel.load()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return true;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(until - now, std::chrono::milliseconds(50)));
  }
  return false;
}

AcmeResult<std::unique_ptr<AcmeClient>> AcmeClient::create(AcmeClientConfig config) {
  if (config.directoryUrl.empty()) return acmeError(AcmeReason::kConfig, "ACME_URL is not set");
  if (config.accountKeyJwk.empty()) {
    return acmeError(AcmeReason::kConfig, "ACME_ACCOUNT_KEY_JWK is not set");
  }
  if (config.eabKid.empty() != config.eabHmacKey.empty()) {
    return acmeError(AcmeReason::kConfig,
                     "ACME_EAB_KID and ACME_EAB_HMAC_KEY must be set together");
  }
  auto key = jws::parsePrivateJwk(config.accountKeyJwk);
  if (!key) return acmeError(AcmeReason::kConfig, "ACME_ACCOUNT_KEY_JWK: " + key.error().message);
  auto jwk = jws::publicJwk(key->get());
  if (!jwk) return acmeError(AcmeReason::kConfig, "ACME_ACCOUNT_KEY_JWK: " + jwk.error().message);
  std::unique_ptr<AcmeClient> client(new AcmeClient(std::move(config)));
  client->key_ = std::move(key).value();
  client->jwk_ = std::move(jwk).value();
  client->thumbprint_ = jws::thumbprint(client->jwk_);
  return client;
}

std::string AcmeClient::newOrderUrl() {
  const std::lock_guard lock(mutex_);
  return newOrderUrl_;
}

std::string AcmeClient::accountUrl() {
  const std::lock_guard lock(mutex_);
  return accountUrl_;
}

AcmeStatus AcmeClient::loadDirectory(const std::atomic<bool>& cancel) {
  {
    const std::lock_guard lock(mutex_);
    if (haveDirectory_) return Ok{};
  }
  auto reply = exchange(config_.directoryUrl, "", "application/json", cancel);
  if (!reply) return reply.error();
  const nlohmann::json& directory = reply->json;
  if (!directory.is_object()) {
    return acmeError(AcmeReason::kBadBody,
                     "the ACME directory is not JSON: " + excerpt(reply->body));
  }
  auto text = [&directory](const char* name) {
    const auto found = directory.find(name);
    return found != directory.end() && found->is_string() ? found->get<std::string>()
                                                          : std::string();
  };
  const std::lock_guard lock(mutex_);
  newNonceUrl_ = text("newNonce");
  newAccountUrl_ = text("newAccount");
  newOrderUrl_ = text("newOrder");
  if (newNonceUrl_.empty() || newAccountUrl_.empty() || newOrderUrl_.empty()) {
    return acmeError(AcmeReason::kBadBody, "the ACME directory lacks newNonce/newAccount/newOrder");
  }
  const auto meta = directory.find("meta");
  eabRequired_ =
      meta != directory.end() && meta->is_object() && meta->value("externalAccountRequired", false);
  haveDirectory_ = true;
  return Ok{};
}

AcmeStatus AcmeClient::ensureAccount(const std::atomic<bool>& cancel) {
  {
    const std::lock_guard lock(mutex_);
    if (!accountUrl_.empty()) return Ok{};
  }
  if (auto loaded = loadDirectory(cancel); !loaded) return loaded.error();
  std::string newAccountUrl;
  {
    const std::lock_guard lock(mutex_);
    if (eabRequired_ && config_.eabKid.empty()) {
      return acmeError(AcmeReason::kConfig,
                       "the CA requires external account binding: set ACME_EAB_KID and "
                       "ACME_EAB_HMAC_KEY");
    }
    newAccountUrl = newAccountUrl_;
  }
  nlohmann::json payload{{"termsOfServiceAgreed", true}};
  if (!config_.email.empty()) payload["contact"] = {"mailto:" + config_.email};
  if (!config_.eabKid.empty()) {
    auto binding =
        jws::externalAccountBinding(config_.eabKid, config_.eabHmacKey, jwk_, newAccountUrl);
    if (!binding) return acmeError(AcmeReason::kConfig, binding.error().message);
    payload["externalAccountBinding"] = std::move(binding).value();
  }
  auto reply = signedPost(newAccountUrl, payload.dump(), false, "", cancel);
  if (!reply) return reply.error();
  if (reply->location.empty()) {
    return acmeError(AcmeReason::kBadBody, "newAccount answered without a Location");
  }
  const std::lock_guard lock(mutex_);
  accountUrl_ = reply->location;
  return Ok{};
}

AcmeResult<AcmeReply> AcmeClient::post(const std::string& url, const nlohmann::json& payload,
                                       const std::atomic<bool>& cancel) {
  return signedPost(url, payload.dump(), true, "", cancel);
}

AcmeResult<AcmeReply> AcmeClient::postAsGet(const std::string& url, const std::atomic<bool>& cancel,
                                            const std::string& accept) {
  return signedPost(url, "", true, accept, cancel);
}

AcmeResult<AcmeReply> AcmeClient::signedPost(const std::string& url, const std::string& payload,
                                             bool useKid, const std::string& accept,
                                             const std::atomic<bool>& cancel) {
  bool waited = false;
  for (int attempt = 0;; ++attempt) {
    auto nonce = takeNonce(cancel);
    if (!nonce) return nonce.error();
    nlohmann::json header{{"alg", "ES256"}, {"nonce", *nonce}, {"url", url}};
    if (useKid) {
      header["kid"] = accountUrl();
    } else {
      header["jwk"] = jwk_;
    }
    auto signedBody = jws::signJws(key_.get(), header, payload);
    if (!signedBody) return acmeError(AcmeReason::kOther, signedBody.error().message);
    auto reply = exchange(url, signedBody->dump(), accept, cancel);
    if (reply || cancel.load()) return reply;
    const AcmeError& error = reply.error();
    if (error.reason == AcmeReason::kBadNonce && attempt < config_.badNonceRetries) continue;
    const bool busy = error.httpStatus == 429 || error.httpStatus == 503;
    if (busy && !waited && error.retryAfterMs > 0 &&
        error.retryAfterMs <= config_.maxInlineRetryAfterMs) {
      waited = true;
      if (!waitFor(error.retryAfterMs, cancel)) return reply;
      continue;
    }
    return reply;
  }
}

AcmeResult<std::string> AcmeClient::takeNonce(const std::atomic<bool>& cancel) {
  std::string url;
  {
    const std::lock_guard lock(mutex_);
    if (!nonces_.empty()) {
      std::string nonce = std::move(nonces_.front());
      nonces_.pop_front();
      return nonce;
    }
    url = newNonceUrl_;
  }
  if (url.empty()) return acmeError(AcmeReason::kNonce, "no newNonce URL (directory not loaded)");
  AcmeError last = acmeError(AcmeReason::kNonce, "newNonce answered without a Replay-Nonce");
  for (int attempt = 0; attempt < kNonceFetchAttempts && !cancel.load(); ++attempt) {
    auto response = acmeHttp(config_.http, "HEAD", url, "", "", cancel);
    if (!response) {
      last = response.error();
      continue;
    }
    if (!response->replayNonce.empty()) return response->replayNonce;
    last = acmeError(AcmeReason::kNonce, "newNonce answered " + std::to_string(response->status) +
                                             " without a Replay-Nonce");
    last.httpStatus = response->status;
  }
  if (last.reason != AcmeReason::kTimeout) last.reason = AcmeReason::kNonce;
  return last;
}

void AcmeClient::addNonce(const std::string& nonce) {
  if (nonce.empty()) return;
  const std::lock_guard lock(mutex_);
  nonces_.push_back(nonce);
  while (nonces_.size() > kNoncePoolSize) nonces_.pop_front();
}

AcmeResult<AcmeReply> AcmeClient::exchange(const std::string& url, const std::string& body,
                                           const std::string& accept,
                                           const std::atomic<bool>& cancel) {
  auto response = acmeHttp(config_.http, body.empty() ? "GET" : "POST", url, body, accept, cancel);
  if (!response) return response.error();
  addNonce(response->replayNonce);
  AcmeReply reply;
  reply.status = response->status;
  reply.location = response->location;
  reply.contentType = response->contentType;
  reply.retryAfterMs = response->retryAfterMs;
  if (looksLikeJson(*response)) reply.json = nlohmann::json::parse(response->body, nullptr, false);
  if (reply.json.is_discarded()) reply.json = nullptr;
  reply.body = std::move(response->body);
  if (reply.status >= 200 && reply.status < 300) return reply;

  AcmeError error;
  error.httpStatus = reply.status;
  error.retryAfterMs = reply.retryAfterMs.value_or(0);
  const std::string where = url + " answered " + std::to_string(reply.status);
  if (reply.json.is_object() && reply.json.contains("type")) {
    error.problemType = reply.json.value("type", "");
    error.reason = reasonForProblem(error.problemType, reply.status);
    error.message = where + ": " + reply.json.dump();
  } else {
    error.reason = reasonForStatus(reply.status);
    if (error.reason == AcmeReason::kOther) error.reason = AcmeReason::kBadBody;
    error.message = where + ": " + excerpt(reply.body);
  }
  return error;
}

}  // namespace ot::controld
