// The issuance job runner: claims due jobs from the jobs table (leases make each run on one
// machine at a time), asks the Issuer for the certificate, records the outcome in the tunnel
// record (or the server_certificates row) and tells the relays. Also fires renewal alarms and
// re-adds first-issuance jobs that a bind recorded but failed to queue (the reconcile).
//
// The CA cool-down (setCaCooldown, ca_cooldown_gate.h): while it lasts no first issuance is
// claimed, and renewals (and the domain certificate) run one at a time across the cluster
// (claimProbe, under the probe lease below); each Issuer call's result is reported to it (a success
// ends the cool-down everywhere).
//
// Per claimed job, in order:
//  1. Still wanted? A tunnel job whose tunnel is gone or deleted, or whose certificate is no
//     longer the one the job names (a new bind; for renewals: already renewed), ends abandoned,
//     which is not a failure. A server job must still be the one meta names.
//  2. The names, right before the issuer: the tunnel's CSR passes checkTunnelCsr for its own ID
//     and the domain, and its names equal the record's identifiers (the server CSR passes
//     checkServerCsr). Anything else is refused without contacting the issuer: the job fails, the
//     certificate is marked failed, and an error is logged.
//  3. Issuer::issue, with a cancel flag that turns true on stop() or when the lease is lost.
//  4. Success: the lease is checked again, the record is written (ready, chain, not_after, renewal
//     alarm at renewAtMs) naming its revision (conflicts reload and retry), the job is finished,
//     the record published. Failure: classifyFailure/decideRetry (job_policy.h); when it gives up
//     the certificate is marked failed with the error. A renewal that gives up keeps the
//     certificate it renews (still valid) with the error, and re-arms its alarm renewal_retry_ms
//     later (or at expiry); only an expired one becomes failed.
// Outcomes are recorded only by the lease holder (Store::finishJob); a lost lease drops them.
// Job IDs are described in job_policy.h and server_certificates.h.
//
// Threads: start() runs one loop thread (claims, lease extension every lease_extend_ms, alarms,
// reconcile) plus one thread per running job, at most `concurrency`; first issuance never takes
// the last free slot, which stays for renewals and the domain certificate (with concurrency 1
// there is nothing to keep). jobAdded() may be called from any thread. runDue(), runAlarms() and
// reconcile() run one round on the calling thread (tests with a manual clock, tools); they must
// not be mixed with start() on one instance. The store, issuer and publisher must outlive it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/analytics/analytics_event.h"
#include "common/clock.h"
#include "common/result.h"
#include "controld/issuance/ca_cooldown_gate.h"
#include "controld/issuance/issuer.h"
#include "controld/issuance/job_policy.h"
#include "controld/relays/record_publisher.h"
#include "controld/store/store.h"

namespace ot::controld {

// During a cool-down a machine may claim a probe only when no job is leased on any machine. The
// look and the claim are made atomic across machines by this short lease in meta
// (meta_lease.h): whoever holds it looks and claims, then releases it, and from then on the
// claimed job's own lease is what every other machine sees.
inline constexpr const char* kCaProbeMetaKey = "ca_probe";
// Long enough for two store round trips, short enough that a crash costs little.
inline constexpr int64_t kCaProbeLeaseMs = 10'000;

enum class JobOutcome {
  kDone,
  kRetry,      // failed; pending again with a later next_run_at
  kFailed,     // gave up
  kRefused,    // names the tunnel may not have: failed without contacting the issuer
  kAbandoned,  // no longer wanted
  kDeferred,   // storage trouble before an outcome: pending again, the attempt given back
  kDropped,    // cancelled, or the lease was lost: nothing recorded
};
[[nodiscard]] const char* jobOutcomeName(JobOutcome outcome);

struct JobRunnerConfig {
  std::string owner;    // this machine's ID: the lease owner
  std::string domain;   // tunnels are <id>.<domain>; also the API domain
  int concurrency = 4;  // ISSUANCE_CONCURRENCY
  int64_t leaseMs = 120'000;
  int64_t leaseExtendMs = 40'000;
  // Idle polls are spread over [poll_min_ms, poll_max_ms] so machines do not poll together.
  int64_t pollMinMs = 30'000;
  int64_t pollMaxMs = 60'000;
  int64_t alarmIntervalMs = 60'000;
  int64_t reconcileIntervalMs = 600'000;
  RetryPolicy retry;  // retry.base_delay_ms is ISSUANCE_RETRY_DELAY_MS
  int64_t renewalRetryMs = 86'400'000;
  int recordAttempts = 5;  // writes of a tunnel that keeps changing underneath
  int alarmBatch = 100;
  Clock nowMs;                     // default: the system clock
  std::function<double()> jitter;  // uniform in [0, 1); default: a generator seeded below
  uint64_t jitterSeed = 0;         // 0: seeded from std::random_device
  // Observers (metrics), called on the job's thread; each may be empty. The CA cool-down is
  // told directly (setCaCooldown).
  // on_attempt: every run that ended in an outcome (not kDeferred or kDropped), with its length.
  std::function<void(JobKind, JobOutcome, double seconds)> onAttempt;
  // on_failure: every failed Issuer call, with what the issuer knew about it.
  std::function<void(JobKind, const FailureDetail&)> onFailure;
  // Told of certificate.issued and certificate.failed (docs/analytics.md); may be empty.
  analytics::EventSink events{};
};

struct JobRun {
  std::string jobId;
  JobOutcome outcome = JobOutcome::kDone;
};

// The storage JobRunner touches, by role (controld passes its one Store for each).
struct JobRunnerStores {
  TunnelStore& tunnels;            // records, renewal alarms, the reconcile scan
  JobStore& jobs;                  // claims, leases, outcomes
  MetaStore& meta;                 // the CA probe's lease, the API domain's job
  CertificateStore& certificates;  // the API domain's certificate row
};

class JobRunner final : public JobNotifier {
 public:
  JobRunner(JobRunnerConfig config, JobRunnerStores stores, Issuer& issuer,
            RecordPublisher& publisher);
  ~JobRunner() override;  // stop()
  JobRunner(const JobRunner&) = delete;
  JobRunner& operator=(const JobRunner&) = delete;

  // Receives the domain certificate after a server job stored it (ServerCertificates::adopt).
  // Without one, it goes straight to RecordPublisher::publishApiCertificate. Set before start().
  void setServerCertificateHandler(std::function<void(const ServerCertificate&)> handler);
  // The shared CA cool-down (nullptr: none, the default). It must outlive the runner. Set before
  // start().
  void setCaCooldown(CaCooldownGate* cooldown) { cooldown_ = cooldown; }

  // The names this machine's running jobs are issuing for right now: <tunnel>.<domain> for tunnel
  // jobs, the domain for its own certificate (the DNS sweep keeps their challenge records). Any
  // thread.
  [[nodiscard]] std::set<std::string> runningNames();
  // runningNames() plus the names of every job leased on any machine (read from the store):
  // what the DNS sweep must keep. Blocks on the store; any thread but the I/O loop.
  [[nodiscard]] Result<std::set<std::string>> clusterRunningNames();

  // Releases leases an earlier run of this machine left (it takes its own jobs back at once),
  // then starts the loop.
  void start();
  // Cancels running issues, waits for them, releases this machine's leases. Idempotent.
  void stop();

  void jobAdded() override;

  // Claims and runs due jobs one at a time until none is due (or max_jobs ran).
  std::vector<JobRun> runDue(int maxJobs = 1000);
  // One claimed job, already leased to this runner's owner.
  JobOutcome runJob(Job job, const std::atomic<bool>& cancel);
  // Fires due renewal alarms (each once across machines); answers how many jobs it added.
  Result<int> runAlarms();
  // Adds the missing job of every tunnel that shows a first issuance in progress, and queues
  // once more (with a fresh retry window) each first issuance that gave up on a transient failure
  // and was never requeued, while its tunnel still shows that certificate (job_reconcile.cc).
  // Answers how many jobs it added or requeued.
  Result<int> reconcile();

  [[nodiscard]] const JobRunnerConfig& config() const { return config_; }

 private:
  enum class Want { kRun, kAbandon, kAlreadyDone, kAlreadyFailed };
  struct Running {
    Job job;
    std::atomic<bool> cancel{false};
    bool finished = false;  // guarded by mutex_
    std::thread thread;
  };
  using SteadyTime = std::chrono::steady_clock::time_point;

  // job_runner.cc: threads, leases, alarms.
  void loop();
  void fillSlots();
  void launch(const Job& job);
  void extendLeases();
  void reapLocked();
  void noteRetryAt(int64_t nextRunAtMs);
  [[nodiscard]] double jitter();
  [[nodiscard]] int64_t pollIntervalMs();
  // The cool-down's end while one lasts (and a wake-up for it), nullopt otherwise.
  [[nodiscard]] std::optional<int64_t> issuancePausedUntil();
  // During a cool-down: a renewal or domain job, claimed only while no job is leased on any
  // machine (under the probe lease, kCaProbeMetaKey); nullopt while another attempt runs.
  Result<std::optional<Job>> claimProbe();
  // Tells the cool-down what an Issuer call that was not cancelled came to.
  void reportToCooldown(bool issued, const FailureDetail& detail);

  // job_reconcile.cc: the reconcile's two parts.
  Result<int> addMissingJobs(int64_t nowMs);
  Result<int> requeueTransientFailures(int64_t nowMs);
  // Requeues one failed first issuance; false when it no longer qualifies.
  Result<bool> requeue(const Job& job, int64_t nowMs);

  // job_attempt.cc: one job.
  [[nodiscard]] static Want wants(const Job& job, const TunnelRecord& record);
  JobOutcome runTunnelJob(Job& job, const std::atomic<bool>& cancel);
  JobOutcome runServerJob(Job& job, const std::atomic<bool>& cancel);
  [[nodiscard]] Result<std::vector<std::string>> tunnelNames(const TunnelRecord& record) const;
  JobOutcome recordIssued(Job& job, const IssuedCertificate& issued);
  JobOutcome recordFailure(Job& job, const Error& error, const FailureDetail& detail);
  // transient: the last failure was transient (a first issuance is then marked for the
  // reconcile's requeue).
  JobOutcome giveUp(Job& job, const std::string& message, bool refused, bool transient = false);
  JobOutcome recordServerIssued(Job& job, ServerCertificate row, const IssuedCertificate& issued);
  JobOutcome recordServerFailure(Job& job, const Error& error, const FailureDetail& detail);
  // decideRetry, then no earlier than the CA's Retry-After.
  [[nodiscard]] RetryDecision retryAfterFailure(const Job& job, const FailureDetail& detail);
  // Loads the tunnel, applies `change` if the job is still wanted, writes it naming the revision
  // (conflicts reload). nullopt: no longer wanted.
  Result<std::optional<StoredTunnel>> updateIfWanted(
      const Job& job, const std::function<void(TunnelRecord&)>& change);
  [[nodiscard]] bool stillLeased(const Job& job);
  JobOutcome finish(Job& job, JobStatus status, const std::string& error, JobOutcome outcome);
  JobOutcome deferForStorage(Job& job, const Error& error, const char* operation);

  JobRunnerConfig config_;
  JobRunnerStores stores_;
  Issuer& issuer_;
  RecordPublisher& publisher_;
  std::function<void(const ServerCertificate&)> serverHandler_;
  CaCooldownGate* cooldown_ = nullptr;

  std::mutex jitterMutex_;
  std::mt19937_64 random_;

  std::mutex mutex_;
  std::condition_variable wake_;
  bool started_ = false;
  bool stopping_ = false;
  bool wakeRequested_ = false;
  bool slotFreed_ = false;
  std::optional<SteadyTime> retryWake_;
  std::list<Running> running_;
  std::thread loopThread_;
};

}  // namespace ot::controld
