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

const log::Logger kServerCertificatesLog("controld.server_certificates");

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

std::optional<int64_t> serverJobNumber(std::string_view jobId, std::string_view domain) {
  const std::string prefix = "server:" + std::string(domain) + ":";
  if (jobId.size() <= prefix.size() || jobId.substr(0, prefix.size()) != prefix) {
    return std::nullopt;
  }
  const std::string_view digits = jobId.substr(prefix.size());
  if (digits.size() > 18) return std::nullopt;
  int64_t number = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    number = number * 10 + (c - '0');
  }
  return number;
}

bool serverCertificateDue(const ServerCertificate& certificate, int64_t nowMs) {
  if (certificate.chainPem.empty()) return true;
  auto validity = leafValidity(certificate.chainPem);
  if (!validity) return true;
  return nowMs >= renewAtMs(validity->notBeforeMs, validity->notAfterMs);
}

ServerCertificates::ServerCertificates(ServerCertificatesConfig config,
                                       ServerCertificatesStores stores, RecordPublisher& publisher,
                                       JobNotifier* notifier)
    : config_(std::move(config)),
      stores_(stores),
      publisher_(publisher),
      notifier_(notifier),
      task_([this] { return checkRound(); }) {
  if (!config_.nowMs) config_.nowMs = unixNowMs;
}

ServerCertificates::~ServerCertificates() {
  stop();
}

Status ServerCertificates::check() {
  return usesFiles() ? checkFiles() : checkIssued();
}

Status ServerCertificates::checkFiles() {
  auto cert = readSmallFile(config_.certFile);
  auto key = cert ? readSmallFile(config_.keyFile) : cert;
  if (!cert || !key) {
    const Error& error = cert ? key.error() : cert.error();
    kServerCertificatesLog.error("cannot read the TLS certificate files",
                                 {{"error", error.message}});
    return error;
  }
  {
    const std::lock_guard lock(mutex_);
    if (*cert == seenCertFile_ && *key == seenKeyFile_) {
      if (seenError_) return *seenError_;
      return Ok{};
    }
    seenCertFile_ = *cert;
    seenKeyFile_ = *key;
    seenError_.reset();
  }
  auto checked = checkApiCertificate(*cert, *key);
  if (!checked) {
    kServerCertificatesLog.error(
        "the TLS certificate files are not usable; keeping the certificate held",
        {{"cert_file", config_.certFile}, {"error", checked.error().message}});
    const std::lock_guard lock(mutex_);
    seenError_ = checked.error();
    return checked.error();
  }
  if (!leafCoversHost(*cert, config_.domain)) {
    kServerCertificatesLog.warn("the TLS certificate does not name the API domain",
                                {{"cert_file", config_.certFile}, {"domain", config_.domain}});
  }
  install(std::move(checked).value(), "file");
  const std::lock_guard lock(mutex_);
  waiting_ = false;
  return Ok{};
}

Status ServerCertificates::checkIssued() {
  const int64_t now = config_.nowMs();
  auto row = stores_.certificates.getServerCertificate(config_.domain);
  if (!row) {
    kServerCertificatesLog.warn("cannot read the domain certificate",
                                {{"error", row.error().message}});
    return row.error();
  }
  if (!*row || (*row)->keyPem.empty()) {
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
  if (!stored.chainPem.empty()) {
    auto checked = checkApiCertificate(stored.chainPem, stored.keyPem);
    if (checked) {
      install(std::move(checked).value(), "database");
    } else {
      kServerCertificatesLog.warn("the stored domain certificate is not usable",
                                  {{"domain", config_.domain}, {"error", checked.error().message}});
    }
  }
  const bool due = serverCertificateDue(stored, now);
  if (due) {
    const Status requested = requestJob(now);
    if (!requested) {
      kServerCertificatesLog.warn("cannot request the domain certificate",
                                  {{"error", requested.error().message}});
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
  const int64_t now = config_.nowMs();
  auto claimed = takeMetaLease(stores_.meta, serverKeyMetaKey(config_.domain), config_.owner, now,
                               now + config_.keyClaimTimeoutMs);
  if (!claimed) return claimed.error();
  if (!*claimed) return false;
  // The claim is ours. A machine that was only slow may have written the row meanwhile.
  auto row = stores_.certificates.getServerCertificate(config_.domain);
  if (!row) return row.error();
  if (*row && !(*row)->keyPem.empty()) return true;
  auto made = makeServerKeyAndCsr(config_.domain);
  if (!made) return made.error();
  ServerCertificate fresh;
  fresh.domain = config_.domain;
  fresh.keyPem = std::move(made->keyPem);
  fresh.csrPem = std::move(made->csrPem);
  const Status put = stores_.certificates.putServerCertificate(fresh);
  if (!put) return put.error();
  kServerCertificatesLog.info("created the domain key", {{"domain", config_.domain}});
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
    kServerCertificatesLog.info("domain certificate requested",
                                {{"domain", config_.domain}, {"job", id}});
    if (notifier_ != nullptr) notifier_->jobAdded();
  }
  return Ok{};
}

void ServerCertificates::adopt(const ServerCertificate& certificate) {
  if (certificate.domain != config_.domain) return;
  auto checked = checkApiCertificate(certificate.chainPem, certificate.keyPem);
  if (!checked) {
    kServerCertificatesLog.error("an issued domain certificate is not usable",
                                 {{"domain", config_.domain}, {"error", checked.error().message}});
    return;
  }
  install(std::move(checked).value(), "issued");
  const std::lock_guard lock(mutex_);
  waiting_ = false;
}

void ServerCertificates::install(ApiCertificatePem certificate, std::string_view source) {
  const std::lock_guard lock(mutex_);
  if (current_ && current_->chainPem == certificate.chainPem &&
      current_->keyPem == certificate.keyPem) {
    return;
  }
  // Configured files always win; from the database only a later certificate replaces one held
  // (a machine that read the row just before a renewal must not go back to the old one).
  if (source != "file" && current_ && current_->notAfterMs > certificate.notAfterMs) return;
  current_ = std::move(certificate);
  // Under the lock, so relays see certificates in the order they were installed.
  publisher_.publishApiCertificate(*current_);
  kServerCertificatesLog.info(
      "domain certificate installed",
      {{"domain", config_.domain}, {"source", source}, {"not_after_ms", current_->notAfterMs}});
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
  const int64_t interval = usesFiles() ? config_.fileCheckIntervalMs
                           : waiting() ? config_.pendingCheckIntervalMs
                                       : config_.checkIntervalMs;
  return std::chrono::milliseconds(interval);
}

}  // namespace ot::controld
