#include "controld/api/tunnel_service.h"

#include <algorithm>
#include <functional>

#include "common/crypto.h"
#include "common/ip_address.h"
#include "common/log.h"
#include "controld/analytics/controld_events.h"
#include "controld/api/ip_ranges.h"
#include "controld/issuance/csr_check.h"

namespace ot::controld {
namespace {

const log::Logger kTunnelServiceLog("controld.api");

constexpr int64_t kHourMs = 3'600'000;
constexpr int64_t kDayMs = 24 * kHourMs;
constexpr int64_t kBacklogRetryAfterS = 30;
// A random ID colliding with an existing one is rare (about 60 bits); a few tries settle it.
constexpr int kRandomIdAttempts = 3;
// A certificate request that loses the race for the tunnel's record reads it again; after the
// first loss it is answered from what it reads (same CSR or another in progress), so two rounds
// settle it and a few bound it.
constexpr int kBindRounds = 3;
// Other writers of a record (issuance, renewals, other controlds) are rare and quick; a pool change
// that keeps losing to them is answered 503 "retry" rather than spinning.
constexpr int kChangeRounds = 5;
// Rate keys live in a VARCHAR(191) column; an unparseable address is cut to fit with its prefix.

ServiceError failure(ServiceErrorKind kind, std::string message, int64_t retryAfterS = 0) {
  return ServiceError{kind, std::move(message), retryAfterS};
}

// Storage failures as the API reports them. The store's own message (which may name tables or
// hosts) goes to the log, not to the client.
ServiceError storageFailure(const Error& error, std::string_view operation, std::string_view id) {
  switch (error.kind) {
    case ErrorKind::kUnavailable:
    case ErrorKind::kTimeout:
      if (id.empty()) {
        kTunnelServiceLog.warn("storage unavailable",
                               {{"operation", operation}, {"error", error.message}});
      } else {
        kTunnelServiceLog.warn(
            "storage unavailable",
            {{"operation", operation}, {"tunnel", id}, {"error", error.message}});
      }
      return failure(ServiceErrorKind::kStorage, "storage unavailable");
    case ErrorKind::kConflict:
      return failure(ServiceErrorKind::kStale, "the tunnel changed; retry");
    case ErrorKind::kNotFound:
      return failure(ServiceErrorKind::kNotFound, "no such tunnel");
    case ErrorKind::kInvalid:
      return failure(ServiceErrorKind::kBadRequest, error.message);
    case ErrorKind::kInternal:
      break;
  }
  kTunnelServiceLog.error("storage failed",
                          {{"operation", operation}, {"tunnel", id}, {"error", error.message}});
  return failure(ServiceErrorKind::kInternal, "internal error");
}

int64_t ceilDiv(int64_t value, int64_t divisor) {
  return value <= 0 ? 0 : (value + divisor - 1) / divisor;
}

// "3 minutes", "1 minute", "5 hours": how long a refused client should wait, rounded up.
std::string roughly(int64_t seconds) {
  const int64_t minutes = std::max<int64_t>(1, ceilDiv(seconds, 60));
  if (minutes <= 90) return std::to_string(minutes) + (minutes == 1 ? " minute" : " minutes");
  const int64_t hours = ceilDiv(minutes, 60);
  return std::to_string(hours) + " hours";
}

std::optional<std::string> randomHex(size_t bytes) {
  auto random = crypto::randomBytes(bytes);
  if (!random) return std::nullopt;
  return crypto::toHex(*random);
}

// The fingerprint of the CSR a certificate was requested with. Records written before the
// fingerprint was kept (or imported) only have the PEM.
std::string boundCsrFingerprint(const CertificateInfo& certificate) {
  if (!certificate.csrSha256.empty()) return certificate.csrSha256;
  if (certificate.csrPem.empty()) return "";
  auto der = csrDerFromPem(certificate.csrPem);
  if (!der) return "";
  return crypto::toHex(crypto::sha256(std::span<const uint8_t>(*der)));
}

}  // namespace

std::string clientRateKey(std::string_view clientAddress) {
  if (std::optional<std::string> key = sourceKey(clientAddress)) return std::move(*key);
  // Never the text itself: an endpoint ("ip:port") or junk would be a fresh budget per variant.
  // Requests without a usable address share one budget instead.
  return "unknown";
}

TunnelService::TunnelService(TunnelServiceConfig config, TunnelServiceStores stores,
                             const BridgeRegistry& bridges, RecordPublisher& publisher,
                             JobNotifier& notifier, Clock nowMs)
    : config_(std::move(config)),
      stores_(stores),
      bridges_(bridges),
      publisher_(publisher),
      notifier_(notifier),
      nowMs_(std::move(nowMs)) {}

void TunnelService::limited(std::string_view limit) const {
  if (config_.onLimited) config_.onLimited(limit);
}

std::mutex& TunnelService::tunnelLock(std::string_view id) {
  return tunnelLocks_[std::hash<std::string_view>{}(id) % tunnelLocks_.size()];
}

std::optional<ServiceError> TunnelService::checkBacklog() {
  if (config_.issuanceBacklogLimit <= 0) return std::nullopt;
  const int64_t now = nowMs_();
  bool read = false;
  {
    const std::lock_guard lock(backlogMutex_);
    if (!backlogReading_ &&
        (!backlogReadAtMs_ || now - *backlogReadAtMs_ >= config_.backlogCacheMs)) {
      // One caller reads; the others go on with the previous count meanwhile.
      backlogReading_ = true;
      backlogReadAtMs_ = now;
      read = true;
    }
  }
  if (read) {
    const Result<int64_t> pending = stores_.jobs.countJobs(JobStatus::kPending, 0);
    if (!pending) {
      kTunnelServiceLog.warn("cannot read the issuance backlog; not limiting",
                             {{"error", pending.error().message}});
    }
    const std::lock_guard lock(backlogMutex_);
    backlogPending_ = pending ? std::optional<int64_t>(*pending) : std::nullopt;
    backlogReading_ = false;
  }
  std::optional<int64_t> pending;
  {
    const std::lock_guard lock(backlogMutex_);
    pending = backlogPending_;
  }
  if (!pending || *pending <= config_.issuanceBacklogLimit) return std::nullopt;
  return failure(ServiceErrorKind::kBusy,
                 "Certificate issuance is backed up right now; try again in a little while",
                 kBacklogRetryAfterS);
}

std::optional<ServiceError> TunnelService::charge(const std::string& key, int64_t perPeriod,
                                                  int64_t periodMs, int64_t burst,
                                                  std::string_view what) {
  if (perPeriod <= 0) return std::nullopt;
  const int64_t intervalMs = std::max<int64_t>(1, periodMs / perPeriod);
  const Result<RateDecision> decision =
      stores_.rateLimits.acquireRate(key, nowMs_(), intervalMs, std::max<int64_t>(1, burst));
  if (!decision) return storageFailure(decision.error(), "acquireRate", "");
  if (decision->allowed) return std::nullopt;
  const int64_t retryAfterS = std::max<int64_t>(1, ceilDiv(decision->retryAfterMs, 1000));
  kTunnelServiceLog.info("rate limited", {{"key", key}, {"retry_after_s", retryAfterS}});
  return failure(ServiceErrorKind::kRateLimited,
                 std::string(what) + "; try again in about " + roughly(retryAfterS), retryAfterS);
}

ServiceResult<CreatedTunnel> TunnelService::createTunnel(const std::optional<std::string>& wantedId,
                                                         std::string_view clientAddress) {
  if (wantedId && !isValidTunnelId(*wantedId)) {
    return failure(ServiceErrorKind::kBadRequest,
                   "id must be one DNS label: 1 to 63 characters of a-z, 0-9 and '-', not "
                   "starting or ending with '-'");
  }
  if (auto busy = checkBacklog()) {
    limited("issuance_backlog");
    return *busy;
  }
  if (auto refused =
          charge("create:" + clientRateKey(clientAddress), config_.createRatePerHour, kHourMs,
                 config_.createRateBurst, "This address has created too many tunnels")) {
    if (refused->kind == ServiceErrorKind::kRateLimited) limited("create_rate");
    return *refused;
  }

  const std::optional<std::string> token = crypto::randomToken(32);
  if (!token) return failure(ServiceErrorKind::kInternal, "no randomness available");
  TunnelRecord record;
  record.tokenSha256Hex = crypto::toHex(crypto::sha256(*token));
  record.createdAtMs = nowMs_();

  const int attempts = wantedId ? 1 : kRandomIdAttempts;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    record.id = wantedId ? *wantedId : newTunnelId();
    record.hostname = record.id + "." + config_.domain;
    const Result<int64_t> revision = stores_.tunnels.insertTunnel(record);
    if (!revision) {
      if (revision.error().kind != ErrorKind::kConflict) {
        return storageFailure(revision.error(), "insertTunnel", record.id);
      }
      if (wantedId) return failure(ServiceErrorKind::kIdTaken, "that tunnel id is taken");
      continue;
    }
    publisher_.publishRecord(StoredTunnel{record, *revision});
    kTunnelServiceLog.info("tunnel created",
                           {{"tunnel", record.id}, {"chosen_id", wantedId.has_value()}});
    if (config_.events)
      config_.events(tunnelCreatedEvent(record.id, wantedId.has_value(), nowMs_()));
    return CreatedTunnel{record.id, record.hostname, *token, "https://" + record.hostname};
  }
  return failure(ServiceErrorKind::kInternal, "could not find a free tunnel id");
}

ServiceResult<StoredTunnel> TunnelService::authorize(std::string_view id,
                                                     const std::optional<std::string>& token) {
  if (!token || token->empty()) {
    return failure(ServiceErrorKind::kUnauthorized, "a bearer token is required");
  }
  // Not a DNS label: no such tunnel can exist, and the store is spared the lookup.
  if (!isValidTunnelId(id)) return failure(ServiceErrorKind::kNotFound, "no such tunnel");
  const std::string key(id);
  Result<std::optional<StoredTunnel>> stored = stores_.tunnels.getTunnel(key);
  if (!stored) return storageFailure(stored.error(), "getTunnel", id);
  if (!stored->has_value() || (*stored)->record.deleted()) {
    return failure(ServiceErrorKind::kNotFound, "no such tunnel");
  }
  const auto expected = crypto::fromHex((*stored)->record.tokenSha256Hex);
  const crypto::Sha256Digest presented = crypto::sha256(*token);
  if (!expected || !crypto::constantTimeEqual(*expected, presented)) {
    return failure(ServiceErrorKind::kUnauthorized, "the token is not valid for this tunnel");
  }
  return std::move(**stored);
}

ServiceResult<TunnelView> TunnelService::getTunnel(std::string_view id,
                                                   const std::optional<std::string>& token) {
  auto stored = authorize(id, token);
  if (!stored) return stored.error();
  const size_t bridges = bridges_.bridgeCount(stored->record.id);
  return TunnelView{std::move(stored).value().record, bridges};
}

ServiceResult<CertificateInfo> TunnelService::getCertificate(
    std::string_view id, const std::optional<std::string>& token) {
  auto stored = authorize(id, token);
  if (!stored) return stored.error();
  return std::move(stored).value().record.certificate;
}

ServiceResult<CertificateBinding> TunnelService::bindCertificate(
    std::string_view id, const std::optional<std::string>& token, std::string_view csrPem) {
  // Serializes this process's requests for one tunnel; other processes are kept apart by the
  // revision the record is written at (below).
  const std::lock_guard lock(tunnelLock(id));
  for (int round = 0; round < kBindRounds; ++round) {
    auto authorized = authorize(id, token);
    if (!authorized) return authorized.error();
    StoredTunnel stored = std::move(authorized).value();
    TunnelRecord& record = stored.record;

    const Result<CsrInfo> csr = checkTunnelCsr(csrPem, record.id, config_.domain);
    if (!csr) {
      kTunnelServiceLog.info("certificate request refused",
                             {{"tunnel", record.id}, {"reason", csr.error().message}});
      return failure(ServiceErrorKind::kBadRequest, csr.error().message);
    }
    // The same CSR again (a client resuming its provisioning): answer as before, queue nothing,
    // charge nothing.
    if (record.certificate.state != CertificateState::kNone &&
        boundCsrFingerprint(record.certificate) == csr->derSha256Hex) {
      return CertificateBinding{record.certificate, false};
    }
    // Another CSR is being issued for: replacing it would throw that issuance away and leave
    // its client waiting for a certificate that never matches its key. This one is refused,
    // without spending the budget, until that one is ready or failed.
    if (record.certificate.state == CertificateState::kIssuing) {
      kTunnelServiceLog.info("certificate request refused: another is in progress",
                             {{"tunnel", record.id}, {"certificate", record.certificate.id}});
      return failure(ServiceErrorKind::kCertificateInProgress,
                     "another certificate request (another CSR) for this tunnel is in progress; "
                     "wait until it is ready or failed");
    }
    if (auto busy = checkBacklog()) {
      limited("issuance_backlog");
      return *busy;
    }
    const std::optional<std::string> certificateId = randomHex(16);
    if (!certificateId) return failure(ServiceErrorKind::kInternal, "no randomness available");

    // Claim the tunnel first: the write names the revision read above, so of several processes
    // binding different CSRs at once exactly one wins; the others read the record again and
    // are refused above. Only the winner spends the budget.
    const CertificateInfo previous = record.certificate;
    const std::optional<int64_t> previousRenewAt = record.renewAtMs;
    const int64_t now = nowMs_();
    CertificateInfo certificate;
    certificate.id = *certificateId;
    certificate.state = CertificateState::kIssuing;
    certificate.csrPem = std::string(csrPem);
    certificate.csrSha256 = csr->derSha256Hex;
    certificate.identifiers = csr->names;
    certificate.requestedAtMs = now;
    record.certificate = std::move(certificate);
    // The renewal alarm belonged to the certificate this one replaces.
    record.renewAtMs.reset();

    const Result<int64_t> revision = stores_.tunnels.updateTunnel(record, stored.revision);
    if (!revision) {
      if (revision.error().kind == ErrorKind::kConflict) continue;  // read it again
      return storageFailure(revision.error(), "updateTunnel", record.id);
    }
    stored.revision = *revision;

    if (auto refused = charge("issue:" + record.id, config_.issuanceRatePerDay, kDayMs,
                              config_.issuanceRateBurst,
                              "This tunnel has asked for too many new certificates")) {
      if (refused->kind == ServiceErrorKind::kRateLimited) limited("issuance_rate");
      // Give the claim back. No job was queued for it; should this write fail, the job that
      // the reconcile queues finds the record changed, or issues once without a charge.
      record.certificate = previous;
      record.renewAtMs = previousRenewAt;
      if (const Result<int64_t> restored = stores_.tunnels.updateTunnel(record, stored.revision);
          !restored) {
        kTunnelServiceLog.warn("cannot restore the certificate after a refused request",
                               {{"tunnel", record.id}, {"error", restored.error().message}});
      }
      return *refused;
    }

    const Job job = pendingJob(JobKind::kIssue, record.certificate.id, record.id, now);
    const Result<bool> added = stores_.jobs.addJob(job);
    if (!added) {
      // The record says issuing; the job runner's reconcile adds the missing job for it.
      kTunnelServiceLog.warn(
          "issuance job not queued; the reconcile will add it",
          {{"tunnel", record.id}, {"certificate", job.id}, {"error", added.error().message}});
    } else if (*added) {
      notifier_.jobAdded();
    }
    publisher_.publishRecord(stored);
    kTunnelServiceLog.info("certificate requested",
                           {{"tunnel", record.id},
                            {"certificate", record.certificate.id},
                            {"names", record.certificate.identifiers.size()}});
    return CertificateBinding{record.certificate, true};
  }
  return failure(ServiceErrorKind::kStale, "the tunnel changed; retry");
}

ServiceResult<std::monostate> TunnelService::deleteTunnel(std::string_view id,
                                                          const std::optional<std::string>& token) {
  const std::lock_guard lock(tunnelLock(id));
  auto authorized = authorize(id, token);
  if (!authorized) return authorized.error();
  StoredTunnel stored = std::move(authorized).value();
  stored.record.deletedAtMs = nowMs_();
  stored.record.renewAtMs.reset();
  const Result<int64_t> revision = stores_.tunnels.updateTunnel(stored.record, stored.revision);
  if (!revision) return storageFailure(revision.error(), "updateTunnel", stored.record.id);
  publisher_.publishDeleted(stored.record.id);
  kTunnelServiceLog.info("tunnel deleted", {{"tunnel", stored.record.id}});
  if (config_.events) config_.events(tunnelDeletedEvent(stored.record.id, nowMs_()));
  return std::monostate{};
}

ServiceResult<StoredTunnel> TunnelService::changeTunnel(std::string_view id,
                                                        const std::optional<std::string>& token,
                                                        const RecordChange& change) {
  const std::lock_guard lock(tunnelLock(id));
  for (int round = 0; round < kChangeRounds; ++round) {
    auto authorized = authorize(id, token);
    if (!authorized) return authorized.error();
    StoredTunnel stored = std::move(authorized).value();
    if (auto refused = change(stored.record)) return *refused;
    const Result<int64_t> revision = stores_.tunnels.updateTunnel(stored.record, stored.revision);
    if (!revision) {
      if (revision.error().kind == ErrorKind::kConflict) continue;  // another writer: read again
      return storageFailure(revision.error(), "updateTunnel", stored.record.id);
    }
    stored.revision = *revision;
    publisher_.publishRecord(stored);
    return stored;
  }
  return failure(ServiceErrorKind::kStale, "the tunnel changed; retry");
}

ServiceResult<std::monostate> TunnelService::health() {
  const Status pinged = stores_.health.ping();
  if (!pinged) return storageFailure(pinged.error(), "ping", "");
  return std::monostate{};
}

}  // namespace ot::controld
