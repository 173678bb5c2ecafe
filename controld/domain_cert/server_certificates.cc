#include "controld/domain_cert/server_certificates.h"

#include <chrono>
#include <fstream>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "controld/domain_cert/server_key.h"
#include "controld/issuance/job_policy.h"
#include "controld/store/meta_lease.h"

namespace ot::controld {
namespace {

const log::Logger kLog("controld.server_certificates");

// Certificate and key files are small; anything larger is not one.
constexpr std::streamsize kMaxPemFileSize = 1 << 20;

Result<std::string> readSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{ErrorKind::kUnavailable, "cannot open " + path};
  std::string text;
  text.resize(static_cast<size_t>(kMaxPemFileSize) + 1);
  in.read(text.data(), kMaxPemFileSize + 1);
  if (in.bad()) return Error{ErrorKind::kUnavailable, "cannot read " + path};
  const std::streamsize got = in.gcount();
  if (got > kMaxPemFileSize) return Error{ErrorKind::kInvalid, path + " is larger than 1 MiB"};
  text.resize(static_cast<size_t>(got));
  return text;
}

}  // namespace

std::string serverJobMetaKey(std::string_view domain) {
  return "server_job:" + std::string(domain);
}

std::string serverKeyMetaKey(std::string_view domain) {
  return "server_key:" + std::string(domain);
}

std::string serverJobId(std::string_view domain, int64_t number) {
  return "server:" + std::string(domain) + ":" + std::to_string(number);
}

std::optional<int64_t> serverJobNumber(std::string_view job_id, std::string_view domain) {
  const std::string prefix = "server:" + std::string(domain) + ":";
  if (job_id.size() <= prefix.size() || job_id.substr(0, prefix.size()) != prefix) {
    return std::nullopt;
  }
  const std::string_view digits = job_id.substr(prefix.size());
  if (digits.size() > 18) return std::nullopt;
  int64_t number = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    number = number * 10 + (c - '0');
  }
  return number;
}

bool serverCertificateDue(const ServerCertificate& certificate, int64_t now_ms) {
  if (certificate.chain_pem.empty()) return true;
  auto validity = leafValidity(certificate.chain_pem);
  if (!validity) return true;
  return now_ms >= renewAtMs(validity->not_before_ms, validity->not_after_ms);
}

ServerCertificates::ServerCertificates(ServerCertificatesConfig config,
                                       ServerCertificatesStores stores, RecordPublisher& publisher,
                                       JobNotifier* notifier)
    : config_(std::move(config)),
      stores_(stores),
      publisher_(publisher),
      notifier_(notifier),
      task_([this] { return checkRound(); }) {
  if (!config_.now_ms) config_.now_ms = unixNowMs;
}

ServerCertificates::~ServerCertificates() {
  stop();
}

Status ServerCertificates::check() {
  return usesFiles() ? checkFiles() : checkIssued();
}

Status ServerCertificates::checkFiles() {
  auto cert = readSmallFile(config_.cert_file);
  auto key = cert ? readSmallFile(config_.key_file) : cert;
  if (!cert || !key) {
    const Error& error = cert ? key.error() : cert.error();
    kLog.error("cannot read the TLS certificate files", {{"error", error.message}});
    return error;
  }
  {
    const std::lock_guard lock(mutex_);
    if (*cert == seen_cert_file_ && *key == seen_key_file_) {
      if (seen_error_) return *seen_error_;
      return Ok{};
    }
    seen_cert_file_ = *cert;
    seen_key_file_ = *key;
    seen_error_.reset();
  }
  auto checked = checkApiCertificate(*cert, *key);
  if (!checked) {
    kLog.error("the TLS certificate files are not usable; keeping the certificate held",
               {{"cert_file", config_.cert_file}, {"error", checked.error().message}});
    const std::lock_guard lock(mutex_);
    seen_error_ = checked.error();
    return checked.error();
  }
  if (!leafCoversHost(*cert, config_.domain)) {
    kLog.warn("the TLS certificate does not name the API domain",
              {{"cert_file", config_.cert_file}, {"domain", config_.domain}});
  }
  install(std::move(checked).value(), "file");
  const std::lock_guard lock(mutex_);
  waiting_ = false;
  return Ok{};
}

Status ServerCertificates::checkIssued() {
  const int64_t now = config_.now_ms();
  auto row = stores_.certificates.getServerCertificate(config_.domain);
  if (!row) {
    kLog.warn("cannot read the domain certificate", {{"error", row.error().message}});
    return row.error();
  }
  if (!*row || (*row)->key_pem.empty()) {
    auto made = ensureKey();
    if (!made) return made.error();
    if (!*made) {
      const std::lock_guard lock(mutex_);
      waiting_ = true;
      return Ok{};
    }
    row = stores_.certificates.getServerCertificate(config_.domain);
    if (!row) return row.error();
    if (!*row) return Error{ErrorKind::kInternal, "the domain key row vanished"};
  }
  const ServerCertificate& stored = **row;
  if (!stored.chain_pem.empty()) {
    auto checked = checkApiCertificate(stored.chain_pem, stored.key_pem);
    if (checked) {
      install(std::move(checked).value(), "database");
    } else {
      kLog.warn("the stored domain certificate is not usable",
                {{"domain", config_.domain}, {"error", checked.error().message}});
    }
  }
  const bool due = serverCertificateDue(stored, now);
  if (due) {
    const Status requested = requestJob(now);
    if (!requested) {
      kLog.warn("cannot request the domain certificate", {{"error", requested.error().message}});
      return requested;
    }
  }
  const std::lock_guard lock(mutex_);
  waiting_ = due || !current_;
  return Ok{};
}

Result<bool> ServerCertificates::ensureKey() {
  // One machine at a time creates the key: the claim is a lease (meta_lease.h) long enough to
  // make a key and write the row. Another machine's live claim means waiting for its row; one
  // that ran out means that machine died first, and the claim is taken over.
  const int64_t now = config_.now_ms();
  auto claimed = takeMetaLease(stores_.meta, serverKeyMetaKey(config_.domain), config_.owner, now,
                               now + config_.key_claim_timeout_ms);
  if (!claimed) return claimed.error();
  if (!*claimed) return false;
  // The claim is ours. A machine that was only slow may have written the row meanwhile.
  auto row = stores_.certificates.getServerCertificate(config_.domain);
  if (!row) return row.error();
  if (*row && !(*row)->key_pem.empty()) return true;
  auto made = makeServerKeyAndCsr(config_.domain);
  if (!made) return made.error();
  ServerCertificate fresh;
  fresh.domain = config_.domain;
  fresh.key_pem = std::move(made->key_pem);
  fresh.csr_pem = std::move(made->csr_pem);
  const Status put = stores_.certificates.putServerCertificate(fresh);
  if (!put) return put.error();
  kLog.info("created the domain key", {{"domain", config_.domain}});
  return true;
}

Status ServerCertificates::requestJob(int64_t now) {
  const std::string key = serverJobMetaKey(config_.domain);
  // Each lost race means another machine just named a job; a few rounds see it.
  for (int round = 0; round < 4; ++round) {
    auto named = stores_.meta.getMeta(key);
    if (!named) return named.error();
    if (!*named) {
      const std::string first = serverJobId(config_.domain, 1);
      auto inserted = stores_.meta.insertMetaIfAbsent(key, first);
      if (!inserted) return inserted.error();
      if (*inserted) return addServerJob(first, now);
      continue;
    }
    const std::string current = **named;
    auto job = stores_.jobs.getJob(current);
    if (!job) return job.error();
    // Named but never added (the machine stopped in between): add it now.
    if (!*job) return addServerJob(current, now);
    if ((*job)->status == JobStatus::kPending) return Ok{};
    const std::optional<int64_t> number = serverJobNumber(current, config_.domain);
    const std::string next = serverJobId(config_.domain, number ? *number + 1 : now);
    auto swapped = stores_.meta.compareAndSetMeta(key, current, next);
    if (!swapped) return swapped.error();
    if (*swapped) return addServerJob(next, now);
  }
  return Ok{};
}

Status ServerCertificates::addServerJob(const std::string& id, int64_t now) {
  auto added = stores_.jobs.addJob(pendingJob(JobKind::kServer, id, {}, now));
  if (!added) return added.error();
  if (*added) {
    kLog.info("domain certificate requested", {{"domain", config_.domain}, {"job", id}});
    if (notifier_ != nullptr) notifier_->jobAdded();
  }
  return Ok{};
}

void ServerCertificates::adopt(const ServerCertificate& certificate) {
  if (certificate.domain != config_.domain) return;
  auto checked = checkApiCertificate(certificate.chain_pem, certificate.key_pem);
  if (!checked) {
    kLog.error("an issued domain certificate is not usable",
               {{"domain", config_.domain}, {"error", checked.error().message}});
    return;
  }
  install(std::move(checked).value(), "issued");
  const std::lock_guard lock(mutex_);
  waiting_ = false;
}

void ServerCertificates::install(ApiCertificatePem certificate, std::string_view source) {
  const std::lock_guard lock(mutex_);
  if (current_ && current_->chain_pem == certificate.chain_pem &&
      current_->key_pem == certificate.key_pem) {
    return;
  }
  // Configured files always win; from the database only a later certificate replaces one held
  // (a machine that read the row just before a renewal must not go back to the old one).
  if (source != "file" && current_ && current_->not_after_ms > certificate.not_after_ms) return;
  current_ = std::move(certificate);
  // Under the lock, so relays see certificates in the order they were installed.
  publisher_.publishApiCertificate(*current_);
  kLog.info(
      "domain certificate installed",
      {{"domain", config_.domain}, {"source", source}, {"not_after_ms", current_->not_after_ms}});
}

std::optional<ApiCertificatePem> ServerCertificates::current() const {
  const std::lock_guard lock(mutex_);
  return current_;
}

bool ServerCertificates::waiting() const {
  const std::lock_guard lock(mutex_);
  return waiting_;
}

void ServerCertificates::start() {
  task_.start();
}

void ServerCertificates::stop() {
  task_.stop();
}

std::chrono::milliseconds ServerCertificates::checkRound() {
  (void)check();  // logs its own failures; the next round tries again
  const int64_t interval = usesFiles() ? config_.file_check_interval_ms
                           : waiting() ? config_.pending_check_interval_ms
                                       : config_.check_interval_ms;
  return std::chrono::milliseconds(interval);
}

}  // namespace ot::controld
