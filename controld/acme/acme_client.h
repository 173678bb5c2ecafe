// The ACME account side of RFC 8555: the directory, the nonce pool, signed requests and the
// account itself (created or found on first use, with external account binding when configured).
// The order flow (acme_order.h) builds on post()/postAsGet().
//
// One AcmeClient is shared by every issuance thread: the directory, the account URL and the nonce
// pool are guarded by a mutex; HTTP runs outside it. Requests that fail with badNonce are retried
// (a few times, each with a fresh nonce); a 429/503 whose Retry-After is short is waited out and
// retried once; longer ones come back as errors carrying retry_after_ms.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "controld/acme/acme_errors.h"
#include "controld/acme/acme_http.h"
#include "controld/base/openssl_util.h"

namespace ot::controld {

struct AcmeClientConfig {
  std::string directoryUrl;
  std::string email;  // "" sends no contact
  std::string eabKid;
  std::string eabHmacKey;     // base64url
  std::string accountKeyJwk;  // private P-256 JWK
  AcmeHttpOptions http;
  int badNonceRetries = 8;  // Pebble rejects half the good nonces in tests
  // Retry-After up to this long is waited out inside a request; longer ones fail the step.
  int64_t maxInlineRetryAfterMs = 10'000;
};

struct AcmeReply {
  int status = 0;
  std::string body;
  std::string location;
  std::string contentType;
  std::optional<int64_t> retryAfterMs;
  nlohmann::json json;  // the parsed body when it is JSON, null otherwise
};

// Waits up to `ms`, returning early (false) when `cancel` turns true.
bool waitFor(int64_t ms, const std::atomic<bool>& cancel);

class AcmeClient {
 public:
  // kConfig errors: no directory URL, an unusable account key, half an EAB.
  static AcmeResult<std::unique_ptr<AcmeClient>> create(AcmeClientConfig config);

  // Fetches the directory and finds or creates the account, once; later calls return at once.
  AcmeStatus ensureAccount(const std::atomic<bool>& cancel);
  // A kid-signed POST of `payload` (a JSON object); a 4xx/5xx answer becomes an AcmeError with
  // the problem document in its message.
  AcmeResult<AcmeReply> post(const std::string& url, const nlohmann::json& payload,
                             const std::atomic<bool>& cancel);
  // POST-as-GET (empty payload). `accept` for the certificate download.
  AcmeResult<AcmeReply> postAsGet(const std::string& url, const std::atomic<bool>& cancel,
                                  const std::string& accept = "");

  [[nodiscard]] const std::string& thumbprint() const { return thumbprint_; }
  [[nodiscard]] std::string newOrderUrl();
  [[nodiscard]] std::string accountUrl();
  [[nodiscard]] const AcmeClientConfig& config() const { return config_; }

 private:
  explicit AcmeClient(AcmeClientConfig config) : config_(std::move(config)) {}
  AcmeStatus loadDirectory(const std::atomic<bool>& cancel);
  AcmeResult<std::string> takeNonce(const std::atomic<bool>& cancel);
  void addNonce(const std::string& nonce);
  // One signed request: kid when `use_kid`, else the account's JWK (newAccount).
  AcmeResult<AcmeReply> signedPost(const std::string& url, const std::string& payload, bool useKid,
                                   const std::string& accept, const std::atomic<bool>& cancel);
  AcmeResult<AcmeReply> exchange(const std::string& url, const std::string& body,
                                 const std::string& accept, const std::atomic<bool>& cancel);

  AcmeClientConfig config_;
  EvpPkeyPtr key_;
  nlohmann::json jwk_;
  std::string thumbprint_;

  std::mutex mutex_;
  bool haveDirectory_ = false;
  std::string newNonceUrl_;
  std::string newAccountUrl_;
  std::string newOrderUrl_;
  bool eabRequired_ = false;
  std::string accountUrl_;  // the kid
  std::deque<std::string> nonces_;
};

}  // namespace ot::controld
