#include "controld/acme/acme_order.h"

#include <openssl/pem.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "common/base64.h"
#include "common/log.h"
#include "controld/acme/acme_dns_check.h"
#include "controld/acme/acme_jws.h"
#include "controld/domain_cert/certificate_pem.h"
#include "controld/issuance/csr_check.h"

namespace ot::controld {
namespace {

const log::Logger kAcmeOrderLog("controld.acme");
constexpr int64_t kMaxPollWaitMs = 60'000;

struct Authz {
  std::string host;  // the identifier, without "*."
  bool wildcard = false;
  std::string status;
  nlohmann::json body;
  bool answered = false;
};

std::string textOf(const nlohmann::json& object, const char* name) {
  if (!object.is_object()) return {};
  const auto found = object.find(name);
  return found != object.end() && found->is_string() ? found->get<std::string>() : std::string();
}

bool isFinal(const std::string& status) {
  return status != "pending" && !status.empty();
}

int64_t steadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class Attempt {
 public:
  Attempt(AcmeClient& client, DnsProvider& dns, const AcmeOrderConfig& config,
          const std::vector<std::string>& names, const std::string& csrPem,
          const std::atomic<bool>& cancel)
      : client_(client),
        dns_(dns),
        config_(config),
        names_(names),
        csrPem_(csrPem),
        cancel_(cancel) {}

  AcmeResult<IssuedCertificate> run() {
    auto result = flow();
    cleanup();
    return result;
  }

 private:
  AcmeResult<IssuedCertificate> flow();
  AcmeStatus refresh(const std::string& url);
  AcmeStatus answer(const std::vector<std::string>& pending);
  AcmeStatus waitPropagation(const std::map<std::string, std::set<std::string>>& records);
  AcmeStatus pollAuthorizations(const std::vector<std::string>& urls);
  AcmeResult<nlohmann::json> pollOrder(nlohmann::json order);
  bool pause(const std::optional<int64_t>& retryAfterMs) {
    const int64_t wait =
        std::min(kMaxPollWaitMs, std::max(config_.pollIntervalMs, retryAfterMs.value_or(0)));
    return waitFor(wait, cancel_);
  }
  AcmeError cancelled() const { return acmeError(AcmeReason::kOther, "the attempt was cancelled"); }
  void deactivate(const std::string& url, Authz& authz, bool& kept);
  void cleanup();

  AcmeClient& client_;
  DnsProvider& dns_;
  const AcmeOrderConfig& config_;
  const std::vector<std::string>& names_;
  const std::string& csrPem_;
  const std::atomic<bool>& cancel_;
  std::map<std::string, Authz> authzs_;  // every authorization seen, by URL
  std::vector<TxtRecord> records_;
  std::string orderUrl_;
  std::optional<int64_t> lastRetryAfterMs_;
};

AcmeStatus Attempt::refresh(const std::string& url) {
  auto reply = client_.postAsGet(url, cancel_);
  if (!reply) return reply.error();
  lastRetryAfterMs_ = reply->retryAfterMs;
  if (!reply->json.is_object()) {
    return acmeError(AcmeReason::kBadBody, "the authorization " + url + " is not JSON");
  }
  Authz& authz = authzs_[url];
  authz.body = reply->json;
  authz.status = textOf(reply->json, "status");
  authz.host = textOf(reply->json.value("identifier", nlohmann::json::object()), "value");
  authz.wildcard = reply->json.value("wildcard", false);
  return Ok{};
}

AcmeResult<IssuedCertificate> Attempt::flow() {
  if (auto account = client_.ensureAccount(cancel_); !account) return account.error();
  nlohmann::json identifiers = nlohmann::json::array();
  for (const auto& name : names_) identifiers.push_back({{"type", "dns"}, {"value", name}});
  nlohmann::json order;
  std::vector<std::string> urls;
  for (int n = 1;; ++n) {
    auto created = client_.post(client_.newOrderUrl(), {{"identifiers", identifiers}}, cancel_);
    if (!created) return created.error();
    if (!created->json.is_object() || created->location.empty()) {
      return acmeError(AcmeReason::kBadBody, "newOrder answered without an order and Location");
    }
    orderUrl_ = created->location;
    order = created->json;
    urls.clear();
    for (const auto& url : order.value("authorizations", nlohmann::json::array())) {
      if (url.is_string()) urls.push_back(url.get<std::string>());
    }
    bool stuck = textOf(order, "status") == "invalid";
    for (const auto& url : urls) {
      if (auto loaded = refresh(url); !loaded) return loaded.error();
      const Authz& authz = authzs_[url];
      if (authz.status == "pending") {
        for (const auto& challenge : authz.body.value("challenges", nlohmann::json::array())) {
          if (textOf(challenge, "status") == "processing") stuck = true;
        }
      } else if (authz.status != "valid") {
        stuck = true;  // invalid, deactivated, expired, revoked: this order cannot succeed
      }
    }
    if (!stuck) break;
    kAcmeOrderLog.warn("abandoning an ACME order with a stuck or failed authorization",
                       {{"name", names_.front()}, {"order", orderUrl_}, {"order_number", n}});
    bool kept = false;
    for (const auto& url : urls) deactivate(url, authzs_[url], kept);
    if (n >= config_.maxOrders) {
      return acmeError(AcmeReason::kAuthzPending,
                       "the CA keeps answering with orders whose authorizations are stuck");
    }
  }
  std::vector<std::string> pending;
  for (const auto& url : urls) {
    if (authzs_[url].status == "pending") pending.push_back(url);
  }
  if (!pending.empty()) {
    if (auto answered = answer(pending); !answered) return answered.error();
    if (auto polled = pollAuthorizations(pending); !polled) return polled.error();
  }
  auto finished = pollOrder(std::move(order));
  if (!finished) return finished.error();
  const std::string certificateUrl = textOf(*finished, "certificate");
  if (certificateUrl.empty())
    return acmeError(AcmeReason::kBadBody, "a valid order without a certificate URL");
  auto chain = client_.postAsGet(certificateUrl, cancel_, "application/pem-certificate-chain");
  if (!chain) return chain.error();
  return parseIssuedChain(chain->body, csrPem_);
}

AcmeStatus Attempt::answer(const std::vector<std::string>& pending) {
  std::map<std::string, std::set<std::string>> wanted;  // TXT name -> values
  std::vector<std::string> challengeUrls;
  for (const auto& url : pending) {
    const Authz& authz = authzs_[url];
    nlohmann::json dns01;
    for (const auto& challenge : authz.body.value("challenges", nlohmann::json::array())) {
      if (textOf(challenge, "type") == "dns-01") dns01 = challenge;
    }
    const std::string token = textOf(dns01, "token");
    if (token.empty() || textOf(dns01, "url").empty()) {
      return acmeError(AcmeReason::kOther, "no dns-01 challenge for " + authz.host);
    }
    wanted["_acme-challenge." + authz.host].insert(jws::dns01Value(token, client_.thumbprint()));
    challengeUrls.push_back(textOf(dns01, "url"));
  }
  for (const auto& [name, values] : wanted) {
    for (const auto& value : values) {
      auto created = dns_.createTxt(name, value);
      if (!created) {
        return acmeError(AcmeReason::kDns,
                         "cannot create the TXT record " + name + ": " + created.error().message);
      }
      if (config_.dnsMetrics != nullptr) config_.dnsMetrics->created.Increment();
      records_.push_back(std::move(created).value());
    }
  }
  if (auto visible = waitPropagation(wanted); !visible) return visible.error();
  for (size_t i = 0; i < pending.size(); ++i) {
    auto answered = client_.post(challengeUrls[i], nlohmann::json::object(), cancel_);
    if (!answered) return answered.error();
    authzs_[pending[i]].answered = true;
  }
  return Ok{};
}

AcmeStatus Attempt::waitPropagation(const std::map<std::string, std::set<std::string>>& records) {
  if (config_.propagationTimeoutMs <= 0) return Ok{};
  const int64_t deadline = steadyMs() + config_.propagationTimeoutMs;
  for (;;) {
    bool all = true;
    for (const auto& [name, values] : records) {
      auto seen =
          config_.lookupTxt ? config_.lookupTxt(name) : lookupTxt(config_.dnsResolver, name);
      if (!seen) {
        all = false;
        kAcmeOrderLog.debug("TXT lookup failed", {{"name", name}, {"error", seen.error().message}});
        continue;
      }
      for (const auto& value : values) {
        if (std::find(seen->begin(), seen->end(), value) == seen->end()) all = false;
      }
    }
    if (all) return Ok{};
    const int64_t left = deadline - steadyMs();
    if (left <= 0) {
      return acmeError(AcmeReason::kDns, "the challenge TXT records did not propagate within " +
                                             std::to_string(config_.propagationTimeoutMs) + " ms");
    }
    if (!waitFor(std::min<int64_t>(left, 500), cancel_)) return cancelled();
  }
}

AcmeStatus Attempt::pollAuthorizations(const std::vector<std::string>& urls) {
  for (int round = 0; round < config_.pollAttempts; ++round) {
    if (!pause(lastRetryAfterMs_)) return cancelled();
    bool allValid = true;
    for (const auto& url : urls) {
      if (authzs_[url].status == "valid") continue;
      if (auto loaded = refresh(url); !loaded) return loaded.error();
      const Authz& authz = authzs_[url];
      if (authz.status == "valid") continue;
      allValid = false;
      if (authz.status == "pending") continue;
      std::string why = authz.status;
      for (const auto& challenge : authz.body.value("challenges", nlohmann::json::array())) {
        if (challenge.contains("error") && challenge["error"].is_object()) {
          why += ": " + textOf(challenge["error"], "type") + ": " +
                 textOf(challenge["error"], "detail");
        }
      }
      const std::string name = (authz.wildcard ? "*." : "") + authz.host;
      return acmeError(AcmeReason::kOther, "ACME authorization for " + name + " ended in " + why);
    }
    if (allValid) return Ok{};
  }
  return acmeError(AcmeReason::kAuthzPending, "an ACME authorization for " + names_.front() +
                                                  " is still pending after " +
                                                  std::to_string(config_.pollAttempts) + " polls");
}

AcmeResult<nlohmann::json> Attempt::pollOrder(nlohmann::json order) {
  bool finalized = false;
  for (int round = 0; round <= config_.pollAttempts; ++round) {
    const std::string status = textOf(order, "status");
    if (status == "valid") return order;
    if (status == "invalid") {
      return acmeError(AcmeReason::kOther, "the ACME order became invalid: " + order.dump());
    }
    if (status == "ready" && !finalized) {
      auto der = csrDerFromPem(csrPem_);
      if (!der) return acmeError(AcmeReason::kRejected, "unreadable CSR: " + der.error().message);
      auto reply =
          client_.post(textOf(order, "finalize"), {{"csr", base64::encodeUrl(*der)}}, cancel_);
      if (!reply) return reply.error();
      finalized = true;
      if (reply->json.is_object()) order = reply->json;
      lastRetryAfterMs_ = reply->retryAfterMs;
      continue;
    }
    if (round > 0 || status != "pending") {  // the order reflects authorizations just polled
      if (!pause(lastRetryAfterMs_)) return cancelled();
    }
    auto reply = client_.postAsGet(orderUrl_, cancel_);
    if (!reply) return reply.error();
    if (!reply->json.is_object()) return acmeError(AcmeReason::kBadBody, "the order is not JSON");
    order = reply->json;
    lastRetryAfterMs_ = reply->retryAfterMs;
  }
  return acmeError(AcmeReason::kAuthzPending,
                   "the ACME order is still " + textOf(order, "status") + " after polling");
}

void Attempt::deactivate(const std::string& url, Authz& authz, bool& kept) {
  static const std::atomic<bool> kNever{false};  // cleanup goes on after a cancel
  if (isFinal(authz.status)) return;
  auto fresh = client_.postAsGet(url, kNever);
  if (fresh && fresh->json.is_object()) authz.status = textOf(fresh->json, "status");
  if (isFinal(authz.status)) return;
  auto done = client_.post(url, {{"status", "deactivated"}}, kNever);
  if (done) {
    authz.status = "deactivated";
    kAcmeOrderLog.info("deactivated a pending ACME authorization", {{"name", authz.host}});
    return;
  }
  kAcmeOrderLog.warn("cannot deactivate an ACME authorization",
                     {{"name", authz.host}, {"error", done.error().message}});
  if (authz.answered) kept = true;
}

void Attempt::cleanup() {
  bool kept = false;
  for (auto& [url, authz] : authzs_) deactivate(url, authz, kept);
  if (kept) {
    kAcmeOrderLog.warn(
        "leaving the challenge records in place: an answered authorization is still open",
        {{"name", names_.front()}, {"records", records_.size()}});
    return;
  }
  for (const auto& record : records_) {
    if (auto deleted = dns_.deleteTxt(record); !deleted) {
      if (config_.dnsMetrics != nullptr) config_.dnsMetrics->deleteFailed.Increment();
      kAcmeOrderLog.warn("cannot delete a challenge record",
                         {{"name", record.name}, {"error", deleted.error().message}});
    } else if (config_.dnsMetrics != nullptr) {
      config_.dnsMetrics->deleted.Increment();
    }
  }
}

}  // namespace

AcmeResult<IssuedCertificate> runAcmeOrder(AcmeClient& client, DnsProvider& dns,
                                           const AcmeOrderConfig& config,
                                           const std::vector<std::string>& names,
                                           const std::string& csrPem,
                                           const std::atomic<bool>& cancel) {
  if (names.empty()) return acmeError(AcmeReason::kRejected, "no names to certify");
  Attempt attempt(client, dns, config, names, csrPem, cancel);
  return attempt.run();
}

AcmeResult<IssuedCertificate> parseIssuedChain(const std::string& chainPem,
                                               const std::string& csrPem) {
  auto validity = leafValidity(chainPem);
  if (!validity) {
    return acmeError(AcmeReason::kBadBody,
                     "the certificate download is not a PEM chain: " + validity.error().message);
  }
  BioPtr bio(BIO_new_mem_buf(chainPem.data(), static_cast<int>(chainPem.size())));
  X509Ptr leaf(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  BioPtr csrBio(BIO_new_mem_buf(csrPem.data(), static_cast<int>(csrPem.size())));
  X509ReqPtr request(csrBio ? PEM_read_bio_X509_REQ(csrBio.get(), nullptr, nullptr, nullptr)
                            : nullptr);
  if (!leaf || !request ||
      EVP_PKEY_eq(X509_get0_pubkey(leaf.get()), X509_REQ_get0_pubkey(request.get())) != 1) {
    ERR_clear_error();
    return acmeError(AcmeReason::kOther, "the CA's certificate is not for the CSR's key");
  }
  IssuedCertificate issued;
  issued.chainPem = chainPem;
  if (!issued.chainPem.empty() && issued.chainPem.back() != '\n') issued.chainPem += '\n';
  issued.notBeforeMs = validity->notBeforeMs;
  issued.notAfterMs = validity->notAfterMs;
  return issued;
}

}  // namespace ot::controld
