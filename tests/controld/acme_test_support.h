// A fake ACME server (RFC 8555, just enough of it) on 127.0.0.1:0 in a thread, a fake DNS
// provider, and an ES256 JWS verifier, for the ACME client tests. The server checks every JWS
// signature and nonce like a CA would, and its behaviour is scripted through public fields set
// before the client talks to it (guarded by the server's mutex afterwards).
#pragma once

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <openssl/ec.h>
#include <openssl/pem.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/base64.h"
#include "controld/acme/acme_jws.h"
#include "controld/acme/dns_provider.h"
#include "controld/base/openssl_util.h"

namespace ot::controld::acme_testing {

using nlohmann::json;

inline std::string decodeText(const std::string& b64url) {
  auto bytes = base64::decodeUrl(b64url);
  REQUIRE(bytes.has_value());
  return std::string(bytes->begin(), bytes->end());
}

// The public key of a JWK {"crv":"P-256","kty":"EC","x","y"}.
inline EvpPkeyPtr publicKeyOf(const json& jwk) {
  auto x = base64::decodeUrl(jwk.at("x").get<std::string>());
  auto y = base64::decodeUrl(jwk.at("y").get<std::string>());
  REQUIRE((x && y && x->size() == 32 && y->size() == 32));
  std::vector<uint8_t> point{0x04};
  point.insert(point.end(), x->begin(), x->end());
  point.insert(point.end(), y->begin(), y->end());
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string("group", const_cast<char*>("prime256v1"), 0),
      OSSL_PARAM_construct_octet_string("pub", point.data(), point.size()), OSSL_PARAM_END};
  EvpPkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr));
  EVP_PKEY* key = nullptr;
  REQUIRE(EVP_PKEY_fromdata_init(ctx.get()) == 1);
  REQUIRE(EVP_PKEY_fromdata(ctx.get(), &key, EVP_PKEY_PUBLIC_KEY, params) == 1);
  return EvpPkeyPtr(key);
}

// Verifies a raw r||s ES256 signature with OpenSSL (converted back to DER).
inline bool verifyEs256(EVP_PKEY* key, const std::string& input, const std::vector<uint8_t>& raw) {
  if (raw.size() != 64) return false;
  ECDSA_SIG* sig = ECDSA_SIG_new();
  ECDSA_SIG_set0(sig, BN_bin2bn(raw.data(), 32, nullptr), BN_bin2bn(raw.data() + 32, 32, nullptr));
  unsigned char* der = nullptr;
  const int derLength = i2d_ECDSA_SIG(sig, &der);
  ECDSA_SIG_free(sig);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  const bool ok =
      EVP_DigestVerifyInit(ctx, nullptr, EVP_sha256(), nullptr, key) == 1 &&
      EVP_DigestVerify(ctx, der, static_cast<size_t>(derLength),
                       reinterpret_cast<const unsigned char*>(input.data()), input.size()) == 1;
  EVP_MD_CTX_free(ctx);
  OPENSSL_free(der);
  ERR_clear_error();
  return ok;
}

class FakeDns final : public DnsProvider {
 public:
  Result<TxtRecord> createTxt(const std::string& name, const std::string& value) override {
    const std::lock_guard lock(mutex_);
    live_.insert({name, value});
    ++created_;
    return TxtRecord{std::to_string(created_), name, value, 0};
  }
  Status deleteTxt(const TxtRecord& record) override {
    const std::lock_guard lock(mutex_);
    live_.erase({record.name, record.value});
    ++deleted_;
    return Ok{};
  }
  Result<std::vector<TxtRecord>> listChallengeRecords(const std::string&) override {
    return std::vector<TxtRecord>{};
  }
  [[nodiscard]] const char* name() const override { return "fake"; }
  std::vector<std::string> valuesOf(const std::string& name) {
    const std::lock_guard lock(mutex_);
    std::vector<std::string> values;
    for (const auto& [n, v] : live_) {
      if (n == name) values.push_back(v);
    }
    return values;
  }
  int created() {
    const std::lock_guard lock(mutex_);
    return created_;
  }
  int deleted() {
    const std::lock_guard lock(mutex_);
    return deleted_;
  }
  size_t live() {
    const std::lock_guard lock(mutex_);
    return live_.size();
  }

 private:
  std::mutex mutex_;
  std::set<std::pair<std::string, std::string>> live_;
  int created_ = 0;
  int deleted_ = 0;
};

struct FakeResponse {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

class FakeAcmeServer {
 public:
  // Scripts (set before use; read under mutex_).
  int badNonces = 0;              // reject this many signed requests with badNonce
  int newOrder503RetryAfter = 0;  // first newOrder: 503 with this Retry-After (s)
  bool newOrder500 = false;       // every newOrder: 500 serverInternal
  bool rejectIdentifier = false;  // every newOrder: 400 rejectedIdentifier
  bool validationHangs = false;   // answered challenges stay processing forever
  int failedOrders = 0;           // this many first orders arrive with an invalid authz
  std::string requireEabKid;      // newAccount must carry an EAB with this kid
  FakeDns* dns = nullptr;         // when set, a challenge is valid only if its TXT value is there

  // Observations.
  int orders = 0;
  int badNonceSent = 0;
  int signedRequests = 0;
  int eabSeen = 0;
  std::vector<std::string> deactivated;  // authorization URLs
  std::vector<std::string> answered;     // challenge URLs
  std::string lastDnsValue;              // of an answered challenge's token, as the client sent

  FakeAcmeServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    socklen_t length = sizeof address;
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    REQUIRE(listen(fd_, 16) == 0);
    base_ = "http://127.0.0.1:" + std::to_string(ntohs(address.sin_port));
    caKey_ = generateEcKey("P-256").value();
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeAcmeServer() {
    stopping_ = true;
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  [[nodiscard]] std::string directoryUrl() const { return base_ + "/dir"; }
  std::mutex mutex_;

 private:
  struct Authz {
    std::string host;
    bool wildcard = false;
    std::string status = "pending";
    std::string challengeStatus = "pending";
    std::string token;
  };
  struct Order {
    std::vector<int> authzs;
    std::string certificate;
    bool finalized = false;
  };

  void serve() {
    while (!stopping_) {
      const int client = accept(fd_, nullptr, nullptr);
      if (client < 0) continue;
      std::string request;
      char buffer[4096];
      size_t headerEnd = std::string::npos;
      size_t contentLength = 0;
      for (;;) {
        const ssize_t got = read(client, buffer, sizeof buffer);
        if (got <= 0) break;
        request.append(buffer, static_cast<size_t>(got));
        if (headerEnd == std::string::npos) {
          headerEnd = request.find("\r\n\r\n");
          if (headerEnd != std::string::npos) {
            const auto at = request.find("Content-Length: ");
            if (at != std::string::npos && at < headerEnd) {
              contentLength = std::stoul(request.substr(at + 16));
            }
          }
        }
        if (headerEnd != std::string::npos && request.size() >= headerEnd + 4 + contentLength) {
          break;
        }
      }
      if (headerEnd == std::string::npos) {
        close(client);
        continue;
      }
      const std::string line = request.substr(0, request.find("\r\n"));
      const std::string method = line.substr(0, line.find(' '));
      const size_t pathStart = line.find(' ') + 1;
      const std::string path = line.substr(pathStart, line.find(' ', pathStart) - pathStart);
      FakeResponse response;
      {
        const std::lock_guard lock(mutex_);
        response = handle(method, path, request.substr(headerEnd + 4));
      }
      std::string out = "HTTP/1.1 " + std::to_string(response.status) + " X\r\n";
      out += "Replay-Nonce: " + newNonce() + "\r\nConnection: close\r\n";
      for (const auto& [name, value] : response.headers) out += name + ": " + value + "\r\n";
      out += "Content-Length: " + std::to_string(response.body.size()) + "\r\n\r\n";
      if (method != "HEAD") out += response.body;
      size_t sent = 0;
      while (sent < out.size()) {
        const ssize_t wrote = write(client, out.data() + sent, out.size() - sent);
        if (wrote <= 0) break;
        sent += static_cast<size_t>(wrote);
      }
      close(client);
    }
  }

  std::string newNonce() {
    const std::lock_guard lock(nonceMutex_);
    std::string nonce = "nonce" + std::to_string(++nonceCounter_);
    nonces_.insert(nonce);
    return nonce;
  }
  bool useNonce(const std::string& nonce) {
    const std::lock_guard lock(nonceMutex_);
    return nonces_.erase(nonce) == 1;
  }

  static FakeResponse problem(int status, const std::string& type, const std::string& detail) {
    return {status,
            json{{"type", "urn:ietf:params:acme:error:" + type}, {"detail", detail}}.dump(),
            {{"Content-Type", "application/problem+json"}}};
  }
  static FakeResponse jsonResponse(int status, const json& body, const std::string& location = "") {
    FakeResponse response{status, body.dump(), {{"Content-Type", "application/json"}}};
    if (!location.empty()) response.headers.emplace_back("Location", location);
    return response;
  }

  json authzJson(int id) {
    const Authz& authz = authzs_[id];
    json body{{"identifier", {{"type", "dns"}, {"value", authz.host}}},
              {"status", authz.status},
              {"challenges",
               {{{"type", "dns-01"},
                 {"url", base_ + "/chall/" + std::to_string(id)},
                 {"token", authz.token},
                 {"status", authz.challengeStatus}}}}};
    if (authz.wildcard) body["wildcard"] = true;
    return body;
  }
  std::string orderStatus(const Order& order) {
    if (!order.certificate.empty()) return "valid";
    for (int id : order.authzs) {
      if (authzs_[id].status == "invalid" || authzs_[id].status == "deactivated") return "invalid";
    }
    for (int id : order.authzs) {
      if (authzs_[id].status != "valid") return "pending";
    }
    return "ready";
  }
  json orderJson(int id) {
    const Order& order = orders_[id];
    json body{{"status", orderStatus(order)},
              {"finalize", base_ + "/finalize/" + std::to_string(id)},
              {"authorizations", json::array()}};
    for (int authz : order.authzs) {
      body["authorizations"].push_back(base_ + "/authz/" + std::to_string(authz));
    }
    if (!order.certificate.empty()) body["certificate"] = base_ + "/cert/" + std::to_string(id);
    return body;
  }

  FakeResponse handle(const std::string& method, const std::string& path, const std::string& body);
  FakeResponse handleSigned(const std::string& path, const json& header,
                            const std::string& payload);
  std::string issue(const std::string& csrB64url);

  int fd_ = -1;
  std::string base_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::mutex nonceMutex_;
  std::set<std::string> nonces_;
  int nonceCounter_ = 0;
  json accountJwk_;
  std::map<int, Authz> authzs_;
  std::map<int, Order> orders_;
  int nextId_ = 1;
  EvpPkeyPtr caKey_;
};

inline FakeResponse FakeAcmeServer::handle(const std::string& method, const std::string& path,
                                           const std::string& body) {
  if (path == "/dir") {
    return jsonResponse(200, {{"newNonce", base_ + "/nonce"},
                              {"newAccount", base_ + "/account"},
                              {"newOrder", base_ + "/order"},
                              {"meta", {{"externalAccountRequired", !requireEabKid.empty()}}}});
  }
  if (path == "/nonce") return {method == "HEAD" ? 200 : 204, "", {}};
  if (method != "POST") return problem(405, "malformed", "POST only");
  const json jws = json::parse(body, nullptr, false);
  if (!jws.is_object()) return problem(400, "malformed", "not a JWS");
  const json header = json::parse(decodeText(jws.value("protected", "")), nullptr, false);
  const std::string payload =
      jws.value("payload", "").empty() ? std::string() : decodeText(jws.value("payload", ""));
  ++signedRequests;
  // The key: the JWK in the header (newAccount) or the account's (kid).
  const json jwk = header.contains("jwk") ? header["jwk"] : accountJwk_;
  if (!jwk.is_object()) return problem(401, "accountDoesNotExist", "unknown account");
  if (header.contains("kid") && header.value("kid", "") != base_ + "/acct/1") {
    return problem(401, "unauthorized", "wrong kid");
  }
  auto signature = base64::decodeUrl(jws.value("signature", ""));
  const EvpPkeyPtr key = publicKeyOf(jwk);
  if (!signature || header.value("alg", "") != "ES256" ||
      !verifyEs256(key.get(), jws.value("protected", "") + "." + jws.value("payload", ""),
                   *signature)) {
    return problem(400, "malformed", "bad signature");
  }
  if (header.value("url", "") != base_ + path) return problem(400, "unauthorized", "url mismatch");
  if (!useNonce(header.value("nonce", "")) || badNonceSent < badNonces) {
    ++badNonceSent;
    return problem(400, "badNonce", "try again");
  }
  return handleSigned(path, header, payload);
}

inline FakeResponse FakeAcmeServer::handleSigned(const std::string& path, const json& header,
                                                 const std::string& payload) {
  const json request = payload.empty() ? json() : json::parse(payload, nullptr, false);
  auto idOf = [&path](const std::string& prefix) { return std::stoi(path.substr(prefix.size())); };
  if (path == "/account") {
    if (!requireEabKid.empty()) {
      const json eab = request.value("externalAccountBinding", json());
      if (!eab.is_object()) return problem(401, "externalAccountRequired", "no EAB");
      const json eabHeader = json::parse(decodeText(eab.value("protected", "")));
      if (eabHeader.value("kid", "") != requireEabKid || eabHeader.value("alg", "") != "HS256" ||
          json::parse(decodeText(eab.value("payload", ""))) != header["jwk"]) {
        return problem(401, "unauthorized", "bad EAB");
      }
      ++eabSeen;
    }
    accountJwk_ = header["jwk"];
    return jsonResponse(201, {{"status", "valid"}}, base_ + "/acct/1");
  }
  if (path == "/order") {
    if (rejectIdentifier) return problem(400, "rejectedIdentifier", "no such names");
    if (newOrder500) return problem(500, "serverInternal", "down");
    if (newOrder503RetryAfter > 0) {
      FakeResponse busy = problem(503, "serverInternal", "busy");
      busy.headers.emplace_back("Retry-After", std::to_string(newOrder503RetryAfter));
      newOrder503RetryAfter = 0;
      return busy;
    }
    ++orders;
    const int orderId = nextId_++;
    Order& order = orders_[orderId];
    for (const auto& identifier : request.at("identifiers")) {
      std::string host = identifier.at("value").get<std::string>();
      const int authzId = nextId_++;
      Authz& authz = authzs_[authzId];
      authz.wildcard = host.rfind("*.", 0) == 0;
      authz.host = authz.wildcard ? host.substr(2) : host;
      authz.token = "token" + std::to_string(authzId);
      if (failedOrders > 0) authz.status = "invalid";
      order.authzs.push_back(authzId);
    }
    if (failedOrders > 0) --failedOrders;
    return jsonResponse(201, orderJson(orderId), base_ + "/order/" + std::to_string(orderId));
  }
  if (path.rfind("/order/", 0) == 0) return jsonResponse(200, orderJson(idOf("/order/")));
  if (path.rfind("/authz/", 0) == 0) {
    const int id = idOf("/authz/");
    if (request.is_object() && request.value("status", "") == "deactivated") {
      authzs_[id].status = "deactivated";
      deactivated.push_back(base_ + path);
    }
    return jsonResponse(200, authzJson(id));
  }
  if (path.rfind("/chall/", 0) == 0) {
    const int id = idOf("/chall/");
    Authz& authz = authzs_[id];
    answered.push_back(base_ + path);
    const std::string expected = jws::dns01Value(authz.token, jws::thumbprint(accountJwk_));
    const auto values = dns != nullptr ? dns->valuesOf("_acme-challenge." + authz.host)
                                       : std::vector<std::string>{expected};
    if (validationHangs) {
      authz.challengeStatus = "processing";
    } else if (std::find(values.begin(), values.end(), expected) == values.end()) {
      authz.challengeStatus = "invalid";
      authz.status = "invalid";
    } else {
      authz.challengeStatus = "valid";
      authz.status = "valid";
    }
    return jsonResponse(200, {{"type", "dns-01"}, {"status", authz.challengeStatus}});
  }
  if (path.rfind("/finalize/", 0) == 0) {
    const int id = idOf("/finalize/");
    if (orderStatus(orders_[id]) != "ready") return problem(403, "orderNotReady", "not ready");
    orders_[id].certificate = issue(request.value("csr", ""));
    if (orders_[id].certificate.empty()) return problem(400, "badCSR", "unreadable CSR");
    return jsonResponse(200, orderJson(id));
  }
  if (path.rfind("/cert/", 0) == 0) {
    return {200,
            orders_[idOf("/cert/")].certificate,
            {{"Content-Type", "application/pem-certificate-chain"}}};
  }
  return problem(404, "malformed", "no such resource");
}

// A certificate for the CSR's key, valid from 2030-01-01 for 90 days, signed by the fake CA.
inline std::string FakeAcmeServer::issue(const std::string& csrB64url) {
  auto der = base64::decodeUrl(csrB64url);
  if (!der) return {};
  const unsigned char* cursor = der->data();
  X509ReqPtr csr(d2i_X509_REQ(nullptr, &cursor, static_cast<long>(der->size())));
  if (!csr) return {};
  X509Ptr certificate(X509_new());
  X509_set_version(certificate.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(certificate.get()), nextId_++);
  X509_set_subject_name(certificate.get(), X509_REQ_get_subject_name(csr.get()));
  X509_NAME* issuer = X509_NAME_new();
  X509_NAME_add_entry_by_txt(issuer, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("fake acme"), -1, -1, 0);
  X509_set_issuer_name(certificate.get(), issuer);
  X509_NAME_free(issuer);
  ASN1_TIME_set(X509_getm_notBefore(certificate.get()), 1893456000);  // 2030-01-01
  ASN1_TIME_set(X509_getm_notAfter(certificate.get()), 1893456000 + 90 * 86400);
  X509_set_pubkey(certificate.get(), X509_REQ_get0_pubkey(csr.get()));
  X509_sign(certificate.get(), caKey_.get(), EVP_sha256());
  auto pem = certificatePem(certificate.get());
  return pem ? *pem : std::string();
}

}  // namespace ot::controld::acme_testing
