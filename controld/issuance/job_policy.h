// The rules the job runner applies, kept apart from its threads and storage so each is tested
// directly: how a failed attempt is classified and when it runs again, when a certificate is
// renewed, and how issuance jobs are named. Pure: no I/O, no clocks, no shared state.
//
// Job IDs (the jobs table's key; adding a job is insert-if-absent, so a name fixes how often a
// piece of work can exist):
//  - First issuance: the certificate ID itself (CertificateInfo::id, new for every new CSR).
//  - Renewal: "<certificate id>:renew:<not_after_ms>:<alarm_at_ms>". The certificate and the
//    expiry it renews pin the job to one certificate generation: once it is renewed (not_after
//    moves) or replaced by a new bind (the ID changes), the job no longer matches and ends as
//    abandoned. The alarm time tells apart a renewal tried again after one that gave up; the same
//    alarm seen twice (two machines, or a rewritten record re-arming the column) adds one job.
//  - The API domain's certificate: "server:<domain>:<n>", see server_certificates.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"
#include "controld/store/tunnel_record.h"

namespace ot::controld {

// A certificate is renewed this long before it expires, or a third of its validity before when
// that is shorter (short-lived certificates).
inline constexpr int64_t kRenewBeforeMs = 30LL * 86'400'000;

enum class FailureClass {
  kTransient,  // the CA or the network: retried with backoff for a day after the job was queued
  kPermanent,  // the request itself is wrong: fails at once
  kOther,      // anything else: a few attempts
};
[[nodiscard]] const char* failureClassName(FailureClass failure);
[[nodiscard]] FailureClass classifyFailure(ErrorKind kind);

struct RetryPolicy {
  int64_t baseDelayMs = 30'000;            // ISSUANCE_RETRY_DELAY_MS
  int64_t maxDelayMs = 3'600'000;          // an hour
  int64_t transientWindowMs = 86'400'000;  // a day after queued_at
  int otherAttempts = 3;
};

// The wait after the attempt numbered `attempt` (1 for the first) failed: base * 2^(attempt-1),
// at most max_delay_ms, then scaled into [delay/2, delay] by jitter01 (in [0, 1)), so runners that
// failed together do not retry together. At least 1 ms.
[[nodiscard]] int64_t retryDelayMs(const RetryPolicy& policy, int attempt, double jitter01);

struct RetryDecision {
  bool retry = false;
  int64_t nextRunAtMs = 0;  // when retry
};

// After attempt number `attempts` (claims so far, as Job::attempts counts them) failed with
// `failure`: run again, or give up. A transient failure is retried while the next run would still
// start within the window after queued_at; "other" failures get policy.other_attempts in all.
[[nodiscard]] RetryDecision decideRetry(const RetryPolicy& policy, FailureClass failure,
                                        int attempts, int64_t queuedAtMs, int64_t nowMs,
                                        double jitter01);

// The reconcile's second chance. A first issuance that gave up on a transient failure (the CA
// or the network down for its whole retry window) is queued once more, with a fresh window. The
// job row says which jobs qualify, through a mark at the start of its last_error:
//  - "transient: <error>": a first issuance that gave up on a transient failure, never requeued;
//    the only jobs the reconcile requeues.
//  - "requeued: <error>": a requeued job; every error it records later keeps the mark, so when it
//    gives up again it is not requeued a second time.
// The tunnel record's certificate error carries no mark.
inline constexpr std::string_view kTransientGiveUpMark = "transient: ";
inline constexpr std::string_view kRequeuedMark = "requeued: ";
// What a job records as last_error when it ends or is retried with `message`: the message,
// marked as requeued when the job's last_error so far (`previous`) was. Pure.
[[nodiscard]] std::string carryRequeuedMark(std::string_view previous, std::string_view message);
// The last_error a requeued job starts with, from the one it failed with. Pure.
[[nodiscard]] std::string requeuedErrorText(std::string_view failedLastError);

// When to renew a certificate valid from not_before to not_after:
// not_after - min(kRenewBeforeMs, validity / 3).
[[nodiscard]] int64_t renewAtMs(int64_t notBeforeMs, int64_t notAfterMs);

// The renewal job for the certificate as it stands, added by the alarm that fired at alarm_at.
[[nodiscard]] std::string renewalJobId(const CertificateInfo& certificate, int64_t alarmAtMs);
// Whether job_id renews exactly this certificate generation (same ID, same not_after).
[[nodiscard]] bool isRenewalOf(std::string_view jobId, const CertificateInfo& certificate);

}  // namespace ot::controld
