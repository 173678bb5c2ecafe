// The API domain's own certificate, which relayd serves for TLS to <domain>. Two sources:
//  - Files (TLS_CERT_FILE / TLS_KEY_FILE, e.g. a Cloudflare Origin CA certificate): loaded and
//    checked (both parse, the key belongs to the leaf), read again every minute and swapped in
//    when their contents change. A bad pair is logged and the last good one kept.
//  - The configured issuer otherwise: the key and CSR are made once per database (a claim in meta,
//    "server_key:<domain>", makes one machine create them; the row in server_certificates holds
//    them), a kServer job "server:<domain>:<n>" is requested with a compare-and-set on meta
//    ("server_job:<domain>" names the current job, so of several machines one adds the next), the
//    JobRunner issues it (checkServerCsr: only the domain itself reaches the issuer) and hands the
//    result to adopt(). Renewed kRenewBeforeMs (or a third of the validity) before expiry, checked
//    hourly, at startup, and every 30 s while no certificate is held or a job is outstanding (a
//    certificate another machine issued is picked up that way).
// Every new certificate goes to RecordPublisher::publishApiCertificate; current() is what a relay
// session that connects later is given.
//
// Owns its check thread; the store, publisher and notifier must outlive it. check(), adopt() and
// current() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/periodic_task.h"
#include "common/result.h"
#include "controld/domain_cert/certificate_pem.h"
#include "controld/relays/record_publisher.h"
#include "controld/store/store.h"

namespace ot::controld {

// Meta keys and job IDs for the domain's certificate.
[[nodiscard]] std::string serverJobMetaKey(std::string_view domain);  // "server_job:<domain>"
[[nodiscard]] std::string serverKeyMetaKey(std::string_view domain);  // "server_key:<domain>"
[[nodiscard]] std::string serverJobId(std::string_view domain, int64_t number);
// n of "server:<domain>:<n>" for this domain; nullopt for anything else.
[[nodiscard]] std::optional<int64_t> serverJobNumber(std::string_view jobId,
                                                     std::string_view domain);

// The stored certificate is missing, unreadable, or at or past its renewal time.
[[nodiscard]] bool serverCertificateDue(const ServerCertificate& certificate, int64_t nowMs);

struct ServerCertificatesConfig {
  std::string domain;
  std::string owner;     // this machine, recorded in the key-creation claim
  std::string certFile;  // TLS_CERT_FILE; with key_file, replaces issuance
  std::string keyFile;   // TLS_KEY_FILE
  int64_t checkIntervalMs = 3'600'000;
  int64_t pendingCheckIntervalMs = 30'000;
  int64_t fileCheckIntervalMs = 60'000;
  // How long a key-creation claim (a meta lease) keeps other machines waiting for the key; one
  // that ran out without a key is taken over (its machine died).
  int64_t keyClaimTimeoutMs = 300'000;
  Clock nowMs;  // default: the system clock
};

// The storage ServerCertificates touches, by role (controld passes its one Store for each).
struct ServerCertificatesStores {
  CertificateStore& certificates;  // the key, CSR and certificate row
  MetaStore& meta;                 // which job serves the domain
  JobStore& jobs;                  // the server job
};

class ServerCertificates {
 public:
  // notifier (may be null) is told when a job was added, to wake the local JobRunner.
  ServerCertificates(ServerCertificatesConfig config, ServerCertificatesStores stores,
                     RecordPublisher& publisher, JobNotifier* notifier);
  ~ServerCertificates();
  ServerCertificates(const ServerCertificates&) = delete;
  ServerCertificates& operator=(const ServerCertificates&) = delete;

  [[nodiscard]] bool usesFiles() const { return !config_.certFile.empty(); }

  // One pass: with files, reload them if they changed; otherwise make sure the key exists, take
  // up a stored certificate newer than the one held, and request a job when one is due. Errors
  // are logged and returned; the certificate held stays.
  Status check();
  // check() now, then on its own thread at the intervals above until stop().
  void start();
  void stop();  // idempotent

  // A certificate the JobRunner stored (JobRunner::setServerCertificateHandler).
  void adopt(const ServerCertificate& certificate);

  [[nodiscard]] std::optional<ApiCertificatePem> current() const;
  // Whether the last check left a job this machine waits for (or no certificate at all).
  [[nodiscard]] bool waiting() const;

 private:
  Status checkFiles();
  Status checkIssued();
  // True when the key row exists (made here or by another machine).
  Result<bool> ensureKey();
  Status requestJob(int64_t now);
  Status addServerJob(const std::string& id, int64_t now);
  // Takes a checked certificate if it differs from the one held; publishes it.
  void install(ApiCertificatePem certificate, std::string_view source);
  // One round of the check thread: check(), then the wait before the next.
  std::chrono::milliseconds checkRound();

  ServerCertificatesConfig config_;
  ServerCertificatesStores stores_;
  RecordPublisher& publisher_;
  JobNotifier* notifier_;

  mutable std::mutex mutex_;
  std::optional<ApiCertificatePem> current_;
  bool waiting_ = true;
  // The file contents last looked at and why they were refused, so a bad pair is logged once
  // (and still returned by every check until it changes).
  std::string seenCertFile_;
  std::string seenKeyFile_;
  std::optional<Error> seenError_;

  PeriodicTask task_;  // last: stopped before the members its rounds read go
};

}  // namespace ot::controld
