// JobRunner: the loop, the job threads, lease extension and renewal alarms. What happens to one
// job is in job_attempt.cc, the reconcile in job_reconcile.cc.
#include "controld/issuance/job_runner.h"

#include <algorithm>
#include <utility>

#include "common/clock.h"
#include "common/log.h"
#include "controld/store/meta_lease.h"

namespace ot::controld {
namespace {

const log::Logger kJobRunnerLog("controld.jobs");

// A wake-up from jobAdded() runs the alarms too, but not more often than this.
constexpr auto kMinAlarmSpacing = std::chrono::seconds(1);
// Rounds of alarms per pass when a batch comes back full.
constexpr int kAlarmRounds = 10;

}  // namespace

const char* jobOutcomeName(JobOutcome outcome) {
  switch (outcome) {
    case JobOutcome::kDone:
      return "done";
    case JobOutcome::kRetry:
      return "retry";
    case JobOutcome::kFailed:
      return "failed";
    case JobOutcome::kRefused:
      return "refused";
    case JobOutcome::kAbandoned:
      return "abandoned";
    case JobOutcome::kDeferred:
      return "deferred";
    case JobOutcome::kDropped:
      return "dropped";
  }
  return "dropped";
}

JobRunner::JobRunner(JobRunnerConfig config, JobRunnerStores stores, Issuer& issuer,
                     RecordPublisher& publisher)
    : config_(std::move(config)), stores_(stores), issuer_(issuer), publisher_(publisher) {
  if (!config_.nowMs) config_.nowMs = unixNowMs;
  config_.concurrency = std::max(1, config_.concurrency);
  config_.leaseMs = std::max<int64_t>(1, config_.leaseMs);
  config_.leaseExtendMs = std::clamp<int64_t>(config_.leaseExtendMs, 1, config_.leaseMs);
  config_.pollMinMs = std::max<int64_t>(1, config_.pollMinMs);
  config_.pollMaxMs = std::max(config_.pollMinMs, config_.pollMaxMs);
  config_.alarmBatch = std::max(1, config_.alarmBatch);
  config_.recordAttempts = std::max(1, config_.recordAttempts);
  random_.seed(config_.jitterSeed != 0 ? config_.jitterSeed : std::random_device{}());
}

JobRunner::~JobRunner() {
  stop();
}

void JobRunner::setServerCertificateHandler(std::function<void(const ServerCertificate&)> handler) {
  serverHandler_ = std::move(handler);
}

void JobRunner::start() {
  {
    const std::lock_guard lock(mutex_);
    if (started_) return;
    started_ = true;
  }
  // A restarted machine takes its own jobs back at once instead of waiting out its old leases.
  const Status released = stores_.jobs.releaseLeases(config_.owner);
  if (!released) {
    kJobRunnerLog.warn("cannot release this machine's old job leases; they expire on their own",
                       {{"error", released.error().message}});
  }
  loopThread_ = std::thread([this] { loop(); });
}

void JobRunner::stop() {
  {
    const std::lock_guard lock(mutex_);
    if (!started_ || stopping_) return;
    stopping_ = true;
    for (Running& running : running_) running.cancel.store(true);
  }
  wake_.notify_all();
  if (loopThread_.joinable()) loopThread_.join();
  const Status released = stores_.jobs.releaseLeases(config_.owner);
  if (!released) {
    kJobRunnerLog.warn("cannot release job leases at shutdown; they expire on their own",
                       {{"error", released.error().message}});
  }
}

void JobRunner::jobAdded() {
  {
    const std::lock_guard lock(mutex_);
    wakeRequested_ = true;
  }
  wake_.notify_all();
}

double JobRunner::jitter() {
  double value = 0.0;
  if (config_.jitter) {
    value = config_.jitter();
  } else {
    const std::lock_guard lock(jitterMutex_);
    value = std::uniform_real_distribution<double>(0.0, 1.0)(random_);
  }
  return std::clamp(value, 0.0, 1.0);
}

int64_t JobRunner::pollIntervalMs() {
  const auto spread = static_cast<double>(config_.pollMaxMs - config_.pollMinMs);
  return config_.pollMinMs + static_cast<int64_t>(spread * jitter());
}

void JobRunner::noteRetryAt(int64_t nextRunAtMs) {
  const int64_t delay = std::max<int64_t>(0, nextRunAtMs - config_.nowMs());
  const SteadyTime at = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay);
  const std::lock_guard lock(mutex_);
  if (!retryWake_ || at < *retryWake_) retryWake_ = at;
}

void JobRunner::loop() {
  using std::chrono::milliseconds;
  using Clock = std::chrono::steady_clock;
  SteadyTime nextAlarms = Clock::now();
  SteadyTime lastAlarms = Clock::now() - kMinAlarmSpacing;
  SteadyTime nextReconcile = Clock::now();
  SteadyTime nextExtend = Clock::now() + milliseconds(config_.leaseExtendMs);
  while (true) {
    bool woken = false;
    {
      const std::lock_guard lock(mutex_);
      reapLocked();
      if (stopping_) break;
      woken = std::exchange(wakeRequested_, false);
      slotFreed_ = false;
      if (retryWake_ && *retryWake_ <= Clock::now()) retryWake_.reset();
    }
    SteadyTime now = Clock::now();
    if (now >= nextReconcile) {
      (void)reconcile();
      nextReconcile = now + milliseconds(config_.reconcileIntervalMs);
    }
    if (now >= nextAlarms || (woken && now - lastAlarms >= kMinAlarmSpacing)) {
      (void)runAlarms();
      lastAlarms = now;
      nextAlarms = now + milliseconds(config_.alarmIntervalMs);
    }
    if (now >= nextExtend) {
      extendLeases();
      nextExtend = now + milliseconds(config_.leaseExtendMs);
    }
    fillSlots();
    now = Clock::now();
    SteadyTime deadline =
        std::min({now + milliseconds(pollIntervalMs()), nextAlarms, nextReconcile});
    std::unique_lock lock(mutex_);
    if (!running_.empty()) deadline = std::min(deadline, nextExtend);
    if (retryWake_) deadline = std::min(deadline, *retryWake_);
    wake_.wait_until(lock, deadline, [this] { return stopping_ || wakeRequested_ || slotFreed_; });
  }
  // Stopping: every running issue was told to cancel; wait for them outside the lock (each
  // takes it once more to say it finished).
  std::list<Running> remaining;
  {
    const std::lock_guard lock(mutex_);
    for (Running& running : running_) running.cancel.store(true);
    remaining.splice(remaining.end(), running_);
  }
  for (Running& running : remaining) {
    if (running.thread.joinable()) running.thread.join();
  }
}

void JobRunner::reapLocked() {
  for (auto it = running_.begin(); it != running_.end();) {
    if (it->finished) {
      // The thread set `finished` as its last step and is ending; the join is immediate.
      if (it->thread.joinable()) it->thread.join();
      it = running_.erase(it);
    } else {
      ++it;
    }
  }
}

std::optional<int64_t> JobRunner::issuancePausedUntil() {
  if (cooldown_ == nullptr) return std::nullopt;
  auto until = cooldown_->pausedUntil();
  // Claim first issuance again as soon as the cool-down ends, not at the next idle poll.
  if (until) noteRetryAt(*until);
  return until;
}

std::set<std::string> JobRunner::runningNames() {
  std::set<std::string> names;
  const std::lock_guard lock(mutex_);
  for (const Running& running : running_) {
    if (running.finished) continue;
    std::string name = jobHostname(running.job, config_.domain);
    if (!name.empty()) names.insert(std::move(name));
  }
  return names;
}

Result<std::set<std::string>> JobRunner::clusterRunningNames() {
  // Leased jobs are bounded by ISSUANCE_CONCURRENCY per machine; the limit only guards a runaway.
  constexpr int kMaxLeasedJobs = 10'000;
  auto leased = stores_.jobs.leasedJobs(config_.nowMs(), kMaxLeasedJobs);
  if (!leased) return leased.error();
  std::set<std::string> names = runningNames();
  for (const Job& job : *leased) {
    std::string name = jobHostname(job, config_.domain);
    if (!name.empty()) names.insert(std::move(name));
  }
  return names;
}

Result<std::optional<Job>> JobRunner::claimProbe() {
  const int64_t now = config_.nowMs();
  // A read first: while another attempt runs (most of a cool-down) no token is written at all.
  auto busy = stores_.jobs.leasedJobs(now, 1);
  if (!busy) return busy.error();
  if (!busy->empty()) return std::optional<Job>{};
  auto lease =
      takeMetaLease(stores_.meta, kCaProbeMetaKey, config_.owner, now, now + kCaProbeLeaseMs);
  if (!lease) return lease.error();
  if (!*lease) return std::optional<Job>{};  // another machine is deciding right now
  Result<std::optional<Job>> claimed = std::optional<Job>{};
  auto running = stores_.jobs.leasedJobs(now, 1);  // again, under the probe lease
  if (!running) {
    claimed = running.error();
  } else if (running->empty()) {
    claimed = stores_.jobs.claimJob(config_.owner, now, config_.leaseMs, false);
  }
  releaseMetaLease(stores_.meta, kCaProbeMetaKey, config_.owner, config_.nowMs());
  return claimed;
}

void JobRunner::fillSlots() {
  while (true) {
    bool includeIssue = true;
    // Read before taking the lock: it may go to the store.
    const bool paused = issuancePausedUntil().has_value();
    {
      const std::lock_guard lock(mutex_);
      if (stopping_) return;
      reapLocked();
      const auto busy = static_cast<int>(running_.size());
      if (busy >= config_.concurrency) return;
      includeIssue = config_.concurrency == 1 || busy + 1 < config_.concurrency;
      // During a cool-down one renewal at a time probes the CA, across the cluster; no first
      // issuance starts.
      if (paused && busy > 0) return;
    }
    auto claimed = paused ? claimProbe()
                          : stores_.jobs.claimJob(config_.owner, config_.nowMs(), config_.leaseMs,
                                                  includeIssue);
    if (!claimed) {
      kJobRunnerLog.warn("cannot claim issuance jobs", {{"error", claimed.error().message}});
      return;
    }
    if (!*claimed) return;
    launch(**claimed);
  }
}

void JobRunner::launch(const Job& job) {
  const std::lock_guard lock(mutex_);
  // A job claimed while stopping is left to releaseLeases().
  if (stopping_) return;
  Running& running = running_.emplace_back();
  running.job = job;
  running.thread = std::thread([this, &running] {
    // The element stays in place until this thread is joined (list nodes never move).
    (void)runJob(running.job, running.cancel);
    {
      const std::lock_guard done(mutex_);
      running.finished = true;
      slotFreed_ = true;
    }
    wake_.notify_all();
  });
}

void JobRunner::extendLeases() {
  // Only this (the loop) thread removes entries, so the pointers stay valid below.
  std::vector<Running*> active;
  {
    const std::lock_guard lock(mutex_);
    for (Running& running : running_) {
      if (!running.finished) active.push_back(&running);
    }
  }
  for (Running* running : active) {
    const auto extended =
        stores_.jobs.extendLease(running->job.id, config_.owner, config_.nowMs() + config_.leaseMs);
    if (!extended) {
      // The database may be back before the lease runs out; the result is checked again
      // before anything is recorded.
      kJobRunnerLog.warn("cannot extend a job lease",
                         {{"job", running->job.id}, {"error", extended.error().message}});
    } else if (!*extended && !running->cancel.load()) {
      kJobRunnerLog.warn("lost the lease of a running job; cancelling it",
                         {{"job", running->job.id}});
      running->cancel.store(true);
    }
  }
}

std::vector<JobRun> JobRunner::runDue(int maxJobs) {
  std::vector<JobRun> runs;
  while (static_cast<int>(runs.size()) < maxJobs) {
    const bool paused = issuancePausedUntil().has_value();
    auto claimed =
        paused ? claimProbe()
               : stores_.jobs.claimJob(config_.owner, config_.nowMs(), config_.leaseMs, true);
    if (!claimed) {
      kJobRunnerLog.warn("cannot claim issuance jobs", {{"error", claimed.error().message}});
      break;
    }
    if (!*claimed) break;
    const std::atomic<bool> cancel{false};
    std::string id = (*claimed)->id;
    const JobOutcome outcome = runJob(std::move(**claimed), cancel);
    runs.push_back({std::move(id), outcome});
  }
  return runs;
}

Result<int> JobRunner::runAlarms() {
  const int64_t now = config_.nowMs();
  int added = 0;
  for (int round = 0; round < kAlarmRounds; ++round) {
    auto due = stores_.tunnels.dueAlarms(now, config_.alarmBatch);
    if (!due) {
      kJobRunnerLog.warn("cannot read renewal alarms", {{"error", due.error().message}});
      return due.error();
    }
    bool progressed = false;
    for (const StoredTunnel& tunnel : *due) {
      const TunnelRecord& record = tunnel.record;
      if (!record.renewAtMs) continue;
      const int64_t alarmAt = *record.renewAtMs;
      auto cleared = stores_.tunnels.clearAlarm(record.id, alarmAt);
      if (!cleared) {
        kJobRunnerLog.warn("cannot clear a renewal alarm",
                           {{"tunnel", record.id}, {"error", cleared.error().message}});
        continue;
      }
      progressed = true;
      if (!*cleared) continue;  // another machine fired it
      const CertificateInfo& certificate = record.certificate;
      if (record.deleted() || certificate.state != CertificateState::kReady ||
          certificate.id.empty()) {
        continue;
      }
      const Job job =
          pendingJob(JobKind::kRenew, renewalJobId(certificate, alarmAt), record.id, now);
      auto inserted = stores_.jobs.addJob(job);
      if (!inserted) {
        // The alarm is spent; the next write of the record or the renewal on attach re-arms it.
        kJobRunnerLog.warn(
            "cannot queue a renewal",
            {{"tunnel", record.id}, {"job", job.id}, {"error", inserted.error().message}});
        continue;
      }
      if (*inserted) {
        ++added;
        kJobRunnerLog.info("certificate renewal queued",
                           {{"tunnel", record.id},
                            {"certificate", certificate.id},
                            {"not_after_ms", certificate.notAfterMs}});
      }
    }
    if (static_cast<int>(due->size()) < config_.alarmBatch || !progressed) break;
  }
  return added;
}

}  // namespace ot::controld
