// What the job runner and server certificate tests share: a manual clock, a publisher that records
// what it was told, issuers of our own interface that count calls, fail on script or block until
// cancelled (the real LocalCa does the signing), tunnels bound the way the API binds them, and
// `openssl verify` run on issued chains. Names live in their own namespace so they never collide
// with other tests' helpers in the same binary.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/metrics.h"
#include "controld/acme/acme_metrics.h"
#include "controld/issuance/csr_check.h"
#include "controld/issuance/issuer.h"
#include "controld/issuance/job_runner.h"
#include "controld/issuance/local_ca.h"
#include "controld/relays/record_publisher.h"
#include "controld/store/store.h"
#include "tests/controld/csr_builder.h"
#include "tests/controld/recording_publisher.h"
#include "tests/controld/test_database.h"

namespace ot::controld::issuance_testing {

inline constexpr const char* kDomain = "tunnel.test";
inline constexpr int64_t kStartMs = 1'750'000'000'000;  // 2025-06-15T15:06:40Z
inline constexpr int64_t kMinute = 60'000;
inline constexpr int64_t kHour = 60 * kMinute;
inline constexpr int64_t kDay = 24 * kHour;

using Publisher = test_support::RecordingPublisher;

class Notifier final : public JobNotifier {
 public:
  void jobAdded() override { ++count_; }
  [[nodiscard]] int count() const { return count_.load(); }

 private:
  std::atomic<int> count_{0};
};

// Answers from a script first (an error, or nullopt to pass the call on), then passes every call
// to `inner`; counts calls per first name. `during` runs inside each call (to change the world
// while an issuance is in flight).
class ScriptedIssuer final : public Issuer {
 public:
  explicit ScriptedIssuer(Issuer* inner) : inner_(inner) {}

  void script(std::deque<std::optional<Error>> answers) {
    const std::lock_guard lock(mutex_);
    script_ = std::move(answers);
  }
  // Every call fails like this once the script is used up (instead of passing on).
  void failAlways(Error error) {
    const std::lock_guard lock(mutex_);
    always_ = std::move(error);
  }
  void during(std::function<void()> hook) {
    const std::lock_guard lock(mutex_);
    during_ = std::move(hook);
  }

  Result<IssuedCertificate> issue(const IssueRequest& request,
                                  const std::atomic<bool>& cancel) override {
    std::optional<Error> failure;
    std::function<void()> hook;
    {
      const std::lock_guard lock(mutex_);
      ++calls_[request.names.empty() ? "" : request.names.front()];
      ++total_;
      if (!script_.empty()) {
        failure = script_.front();
        script_.pop_front();
      } else {
        failure = always_;
      }
      hook = during_;
    }
    if (hook) hook();
    if (failure) return *failure;
    if (inner_ == nullptr) return Error{ErrorKind::kInternal, "no issuer behind the script"};
    return inner_->issue(request, cancel);
  }
  [[nodiscard]] const char* name() const override { return "scripted"; }

  [[nodiscard]] int calls(const std::string& name) const {
    const std::lock_guard lock(mutex_);
    const auto found = calls_.find(name);
    return found == calls_.end() ? 0 : found->second;
  }
  [[nodiscard]] int total() const {
    const std::lock_guard lock(mutex_);
    return total_;
  }
  [[nodiscard]] std::map<std::string, int> allCalls() const {
    const std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  Issuer* inner_;
  mutable std::mutex mutex_;
  std::deque<std::optional<Error>> script_;
  std::optional<Error> always_;
  std::function<void()> during_;
  std::map<std::string, int> calls_;
  int total_ = 0;
};

// Blocks every call until released (then passes it to `inner`) or cancelled (then answers
// kUnavailable, as a real issuer does). Records the names in flight and how many calls were in
// flight at most.
class GateIssuer final : public Issuer {
 public:
  explicit GateIssuer(Issuer& inner) : inner_(inner) {}

  Result<IssuedCertificate> issue(const IssueRequest& request,
                                  const std::atomic<bool>& cancel) override {
    const std::string name = request.names.empty() ? "" : request.names.front();
    {
      std::lock_guard lock(mutex_);
      ++started_;
      inFlight_.push_back(name);
      maxInFlight_ = std::max(maxInFlight_, static_cast<int>(inFlight_.size()));
    }
    changed_.notify_all();
    bool released = false;
    while (true) {
      {
        std::lock_guard lock(mutex_);
        released = released_;
      }
      if (released || cancel.load()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    {
      std::lock_guard lock(mutex_);
      inFlight_.erase(std::find(inFlight_.begin(), inFlight_.end(), name));
      if (!released) ++cancelled_;
    }
    changed_.notify_all();
    if (!released) return Error{ErrorKind::kUnavailable, "issuance cancelled"};
    return inner_.issue(request, cancel);
  }
  [[nodiscard]] const char* name() const override { return "gate"; }

  void release() {
    std::lock_guard lock(mutex_);
    released_ = true;
  }
  // Waits (at most 30 s) until `done` holds over the counters; false on timeout.
  bool waitFor(const std::function<bool(const GateIssuer&)>& done) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(30), [&] { return done(*this); });
  }
  // For waitFor predicates (called with the lock held).
  [[nodiscard]] int startedLocked() const { return started_; }
  [[nodiscard]] int cancelledLocked() const { return cancelled_; }
  [[nodiscard]] const std::vector<std::string>& inFlightLocked() const { return inFlight_; }

  [[nodiscard]] int maxInFlight() const {
    std::lock_guard lock(mutex_);
    return maxInFlight_;
  }
  [[nodiscard]] int cancelled() const {
    std::lock_guard lock(mutex_);
    return cancelled_;
  }

 private:
  Issuer& inner_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int started_ = 0;
  int cancelled_ = 0;
  int maxInFlight_ = 0;
  bool released_ = false;
  std::vector<std::string> inFlight_;
};

inline std::string hostOf(const std::string& tunnelId) {
  return tunnelId + "." + kDomain;
}

// One store in every role the runner takes, as controld wires it.
inline JobRunnerStores runnerStores(Store& store) {
  return {store, store, store, store};
}

// A tunnel bound to a CSR for its own names, as TunnelService::bindCertificate leaves it, with
// its first-issuance job queued at `now`.
inline StoredTunnel bindTunnel(Store& store, const std::string& id, int64_t now,
                               bool wildcard = false, bool queueJob = true) {
  TunnelRecord record = testing::sampleTunnel(id);
  REQUIRE(record.hostname == hostOf(id));
  record.certificate.id = "c" + testing::randomHex(31);
  record.certificate.state = CertificateState::kIssuing;
  record.certificate.csrPem = testing::buildCsrPem(testing::hostCsr(record.hostname, wildcard));
  auto csr = checkTunnelCsr(record.certificate.csrPem, id, kDomain);
  REQUIRE(csr.ok());
  record.certificate.csrSha256 = csr->derSha256Hex;
  record.certificate.identifiers = csr->names;
  record.certificate.requestedAtMs = now;
  auto revision = store.insertTunnel(record);
  REQUIRE(revision.ok());
  if (queueJob) {
    Job job;
    job.id = record.certificate.id;
    job.kind = JobKind::kIssue;
    job.tunnelId = id;
    job.queuedAtMs = now;
    job.nextRunAtMs = now;
    auto added = store.addJob(job);
    REQUIRE(added.ok());
    REQUIRE(*added);
  }
  return StoredTunnel{record, *revision};
}

inline StoredTunnel loadTunnel(Store& store, const std::string& id) {
  auto loaded = store.getTunnel(id);
  REQUIRE(loaded.ok());
  REQUIRE(loaded->has_value());
  return **loaded;
}

inline Job loadJob(Store& store, const std::string& id) {
  auto job = store.getJob(id);
  REQUIRE(job.ok());
  REQUIRE(job->has_value());
  return **job;
}

// Applies `change` to the stored record (as another writer would).
inline void editTunnel(Store& store, const std::string& id,
                       const std::function<void(TunnelRecord&)>& change) {
  StoredTunnel stored = loadTunnel(store, id);
  change(stored.record);
  REQUIRE(store.updateTunnel(stored.record, stored.revision).ok());
}

inline std::unique_ptr<LocalCa> loadCa(Store& store, Clock clock = {},
                                       int64_t validityMs = LocalCa::kDefaultLeafValidityMs) {
  auto ca = LocalCa::load(store, validityMs, std::move(clock));
  REQUIRE_MESSAGE(ca.ok(), (ca.ok() ? "" : ca.error().message));
  return std::move(ca).value();
}

// A runner on the manual clock (or the system clock when null) with a fixed jitter of 0.5, so
// every backoff is exactly three quarters of its undithered delay.
inline JobRunnerConfig runnerConfig(const std::string& owner, ManualClock* clock) {
  JobRunnerConfig config;
  config.owner = owner;
  config.domain = kDomain;
  if (clock != nullptr) config.nowMs = clock->clock();
  config.jitter = [] { return 0.5; };
  return config;
}

// Counts the runner's attempts in `acme_metrics` through the on_attempt hook, as ControldServer
// does.
inline void countAttemptsIn(JobRunnerConfig& config, AcmeMetrics& acmeMetrics) {
  config.onAttempt = [&acmeMetrics](JobKind kind, JobOutcome outcome, double seconds) {
    acmeMetrics.attempt(kind, outcome, seconds);
  };
}

// opentunnel_acme_attempts_total{kind, outcome}.
inline double acmeAttempts(metrics::Metrics& metrics, const char* kind, const char* outcome) {
  return metrics
      .counter("opentunnel_acme_attempts_total", "", {{"kind", kind}, {"outcome", outcome}})
      .Value();
}

inline bool waitUntil(const std::function<bool()>& done,
                      std::chrono::milliseconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "ot-issuance-test-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  REQUIRE(out.good());
  out << text;
  out.close();
  REQUIRE(out.good());
}

struct CommandResult {
  int exitCode = -1;
  std::string output;
};

inline CommandResult runCommand(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  CommandResult result;
  std::array<char, 512> chunk{};
  while (fgets(chunk.data(), static_cast<int>(chunk.size()), pipe) != nullptr) {
    result.output += chunk.data();
  }
  const int status = pclose(pipe);
  result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// The real `openssl verify` of a chain's leaf against the local CA's file, for a TLS server named
// `hostname`, at `at_ms` (0: now).
inline void checkVerifies(const LocalCa& ca, const std::string& chainPem,
                          const std::string& hostname, int64_t atMs = 0) {
  const TempDir dir;
  const std::string caFile = dir.file("ca.pem");
  const std::string leafFile = dir.file("leaf.pem");
  REQUIRE(ca.writeCaFile(caFile).ok());
  writeFile(leafFile, chainPem);
  std::string command = "/usr/bin/openssl verify -CAfile " + caFile +
                        " -purpose sslserver -verify_hostname '" + hostname + "'";
  if (atMs != 0) command += " -attime " + std::to_string(atMs / 1000);
  const CommandResult result = runCommand(command + " " + leafFile);
  INFO("openssl verify: " << result.output);
  CHECK(result.exitCode == 0);
  CHECK(result.output.find(": OK") != std::string::npos);
}

}  // namespace ot::controld::issuance_testing
