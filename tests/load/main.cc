// ot_bridge_load: opens N bridges across T tunnels at a rate, as otunnel opens them, holds them
// idle, optionally restarts relayd (SIGTERM; the operator or run_capacity.py starts the new one)
// and waits for all to come back, printing once a second what relayd and controld spend. With
// --churn it detaches and re-attaches held bridges at a rate (the mesh load, run_mesh.py); with
// --bridges 0 and --visitors it only sends visitors (to bridges another process holds, through
// any relayd). See docs/capacity.md for how to run it and what the numbers mean. Not run by CI.
#include <arpa/inet.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include <CLI/CLI.hpp>
#include <array>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/bridge_settings.h"
#include "client/status_report.h"
#include "common/bridge_control.h"
#include "common/tls_sessions.h"
#include "tests/load/bare_handshake.h"
#include "tests/load/load_bridge.h"
#include "tests/load/load_report.h"
#include "tests/load/proc_sample.h"
#include "tests/load/visitor_driver.h"

namespace ot::load {
namespace {

struct Options {
  std::string relay = "127.0.0.1:8443";
  std::string domain = "opentunnel.localhost";
  std::string caFile;
  std::string tunnelsFile;
  int64_t bridges = 1000;
  double rate = 500;
  int sources = 64;
  std::string sourceBase = "127.1.0.1";
  double holdSeconds = 60;
  int64_t markAt = 10'000;
  double holdLowSeconds = 0;   // > 0: the ramp pauses this long at markAt (an idle figure there)
  std::string storm = "none";  // none | signal | wait
  double stormTimeoutSeconds = 300;
  int relaydPid = 0;
  std::string relaydPidFile;
  std::string relaydExe;
  int controldPid = 0;
  std::string controldExe;
  std::string metrics;  // relayd's metrics host:port
  uint64_t bareHandshakes = 0;
  std::string bareTarget;
  int barePid = 0;
  unsigned bareConcurrency = 4;
  bool bareResume = false;
  uint64_t visitors = 0;
  unsigned visitorConcurrency = 50;
  unsigned visitorRounds = 5;
  double churn = 0;            // changes a second while holding (a cycle is two: detach, attach)
  bool churnOnSignal = false;  // churn only between SIGUSR1 and SIGUSR2
  bool noStatusReports = false;
};

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool parseHostPort(const std::string& text, sockaddr_in& out) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  return uv_ip4_addr(text.substr(0, colon).c_str(), std::atoi(text.c_str() + colon + 1), &out) == 0;
}

// Prints the descriptor limits, raises the soft one to the hard one, and answers how many
// bridges fit (each needs one descriptor here; relayd needs one more per bridge on its side).
int64_t descriptorBudget() {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  std::printf("RLIMIT_NOFILE: soft %llu, hard %llu\n",
              static_cast<unsigned long long>(limit.rlim_cur),   // NOLINT(runtime/int)
              static_cast<unsigned long long>(limit.rlim_max));  // NOLINT(runtime/int)
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) == 0)
      std::printf("raised the soft limit to %llu\n",
                  static_cast<unsigned long long>(limit.rlim_cur));  // NOLINT(runtime/int)
  }
  return static_cast<int64_t>(limit.rlim_cur) - 64;  // stdio, the loop, the sampler's sockets
}

class Tool {
 public:
  Tool(uv_loop_t* loop, Options options) : loop_(loop), options_(std::move(options)) {}

  bool setUp(std::vector<TunnelCredentials> tunnels) {
    tunnels_ = tunnels;
    if (!parseHostPort(options_.relay, target_.relay)) {
      std::fprintf(stderr, "bad --relay %s\n", options_.relay.c_str());
      return false;
    }
    target_.domain = options_.domain;
    target_.statusRefreshMs = options_.noStatusReports ? 0 : client::kReportRefreshMs;
    // otunnel's context (client/bridge_settings.cc): its ALPN offer, so a draining relayd refuses
    // from the ClientHello, and its session tickets, so a reconnect resumes.
    auto context = client::makeRelayContext(options_.caFile);
    if (!context) {
      std::fprintf(stderr, "TLS context: %s\n", context.error().message.c_str());
      return false;
    }
    target_.tlsContext = context.value();
    in_addr base{};
    if (inet_pton(AF_INET, options_.sourceBase.c_str(), &base) != 1) return false;
    for (int64_t i = 0; i < options_.bridges; ++i) {
      in_addr source{};
      source.s_addr = htonl(ntohl(base.s_addr) + static_cast<uint32_t>(i % options_.sources));
      bridges_.push_back(std::make_unique<LoadBridge>(
          loop_, target_, tunnels[static_cast<size_t>(i) % tunnels.size()], source, counters_));
    }
    relaydPid_ = resolveRelayd();
    if (auto before = sampleProcess(relaydPid_)) report_.relaydRssBeforeKiB = before->rssKiB;
    return true;
  }

  void run() {
    start_ = std::chrono::steady_clock::now();
    sampler_ = std::thread([this] { sampleLoop(); });
    uv_timer_init(loop_, &tick_);
    tick_.data = this;
    uv_timer_start(
        &tick_, [](uv_timer_t* t) { static_cast<Tool*>(t->data)->onTick(); }, 10, 10);
    startSignals();
    uv_run(loop_, UV_RUN_DEFAULT);
    stopSampler_ = true;
    sampler_.join();
    {
      std::lock_guard lock(mutex_);
      report_.bridges = options_.bridges;
      report_.markAt = std::min(options_.markAt, options_.bridges / 2);
      if (report_.storm.signalAt >= 0 && !stormDone_) report_.storm.waits = stormWaits();
      report_.waits = waitsNow();
      for (size_t k = 0; k < kWaitKinds; ++k)
        report_.waits.longestMs[k] = std::max(report_.waits.longestMs[k], longestBeforeStorm_[k]);
      report_.fatal = counters_.fatal.load();
      for (size_t c = 0; c < kAttemptCauses; ++c)
        report_.brokenBy[c] = counters_.brokenBy[c].load();
      report_.deadlines = counters_.deadlines.load();
      report_.handshakesFull = counters_.handshakesFull.load();
      report_.handshakesResumed = counters_.handshakesResumed.load();
      printReport(report_);
    }
    if (options_.churn > 0)
      std::printf("churn: %" PRIu64 " bridges detached and attached again (%" PRIu64 " changes)\n",
                  counters_.cycles.load(), 2 * counters_.cycles.load());
  }

 private:
  pid_t resolveRelayd() const {
    if (!options_.relaydPidFile.empty()) return readPidFile(options_.relaydPidFile);
    if (!options_.relaydExe.empty()) return findByExe(options_.relaydExe);
    return options_.relaydPid;
  }
  pid_t resolveControld() const {
    if (!options_.controldExe.empty()) return findByExe(options_.controldExe);
    return options_.controldPid;
  }

  void onTick() {
    const double now = secondsSince(start_);
    const int64_t up = counters_.bridgesUp.load();
    switch (phase_.load()) {
      case Phase::kRamp: {
        const auto due =
            std::min<int64_t>(options_.bridges, int64_t((now - rampPaused_) * options_.rate) + 1);
        const int64_t lowMark = std::min(options_.markAt, options_.bridges / 2);
        const bool pauses = options_.holdLowSeconds > 0 && !rested_;
        if (pauses && started_ >= lowMark && up >= lowMark) {
          rested_ = true;
          enter(Phase::kRest, now);
          break;
        }
        while (started_ < due && (!pauses || started_ < lowMark))
          bridges_[size_t(started_++)]->start();
        if (started_ == options_.bridges && up >= options_.bridges) enter(Phase::kHold, now);
        break;
      }
      case Phase::kRest:
        // The ramp goes on where it stopped, at its rate, not with the pause's worth at once.
        if (now - phaseStart_ >= options_.holdLowSeconds) {
          rampPaused_ += now - phaseStart_;
          enter(Phase::kRamp, now);
        }
        break;
      case Phase::kHold:
        churnStep(now);
        if (options_.storm == "wait" && up < options_.bridges / 2) {
          beginStorm(now, false);
        } else if (now - phaseStart_ >= options_.holdSeconds) {
          if (options_.visitors > 0 && !visitorsStarted_)
            startVisitorPhase(now);
          else
            afterHold(now);
        }
        break;
      case Phase::kVisitors:
        if (visitorsDone_) afterHold(now);
        break;
      case Phase::kStorm:
        if (up >= options_.bridges && sawDrop_ && !stormDone_) {
          std::lock_guard lock(mutex_);
          report_.storm.allBackAt = now;
          report_.storm.waits = stormWaits();
          report_.storm.failures = counters_.failures.load() - failuresAtStorm_;
          report_.storm.handshakesFull = counters_.handshakesFull.load() - fullAtStorm_;
          report_.storm.handshakesResumed = counters_.handshakesResumed.load() - resumedAtStorm_;
          stormDone_ = true;
        }
        if (up < options_.bridges) sawDrop_ = true;
        if (counters_.attaches.load() > attachesAtStorm_ + uint64_t(options_.bridges) / 1000 &&
            firstAttach_ < 0 && sawDrop_) {
          firstAttach_ = now;
          std::lock_guard lock(mutex_);
          report_.storm.firstAttachAt = now;
        }
        if (stormDone_ && now - report_.storm.allBackAt >= 2) finish();
        if (now - phaseStart_ >= options_.stormTimeoutSeconds) finish();
        break;
      case Phase::kDone:
        break;
    }
  }

  // SIGUSR1 / SIGUSR2 start and stop the churn (--churn-on-signal); SIGTERM and SIGINT end the
  // run with its report, so a driver can hold the bridges as long as it needs.
  void startSignals() {
    const std::array<int, 4> signals = {SIGUSR1, SIGUSR2, SIGTERM, SIGINT};
    for (size_t i = 0; i < signals.size(); ++i) {
      uv_signal_init(loop_, &signals_[i]);
      signals_[i].data = this;
      uv_signal_start(
          &signals_[i],
          [](uv_signal_t* handle, int signum) {
            static_cast<Tool*>(handle->data)->onSignal(signum);
          },
          signals[i]);
      uv_unref(reinterpret_cast<uv_handle_t*>(&signals_[i]));
    }
  }

  void onSignal(int signum) {
    const double now = secondsSince(start_);
    if (signum == SIGUSR1) {
      churnOn_ = true;
      churnStart_ = now;
      churnDone_ = 0;
      std::printf("churn on at %.1f s\n", now);
    } else if (signum == SIGUSR2) {
      churnOn_ = false;
      std::printf("churn off at %.1f s\n", now);
    } else {
      finish();
    }
    std::fflush(stdout);
  }

  // Cycles held bridges in turn, churn/2 a second (each is a detach and an attach); a bridge
  // not attached at its turn (still coming back) is skipped, and a second in which none is
  // attached is not made up later.
  void churnStep(double now) {
    if (options_.churn <= 0 || bridges_.empty()) return;
    if (!options_.churnOnSignal && !churnOn_) {
      churnOn_ = true;
      churnStart_ = now;
    }
    if (!churnOn_) return;
    const auto due = static_cast<int64_t>((now - churnStart_) * options_.churn / 2);
    size_t skipped = 0;
    while (churnDone_ < due && skipped < bridges_.size()) {
      if (bridges_[churnNext_++ % bridges_.size()]->cycle())
        ++churnDone_;
      else
        ++skipped;
    }
    if (churnDone_ < due) churnDone_ = due;
  }

  void afterHold(double now) {
    if (options_.storm == "signal")
      beginStorm(now, true);
    else if (options_.storm == "none")
      finish();
    else
      enter(Phase::kHold, now);  // wait for the operator's restart
  }

  void startVisitorPhase(double now) {
    visitorsStarted_ = true;
    enter(Phase::kVisitors, now);
    VisitorPlan plan;
    plan.relay = target_.relay;
    plan.domain = options_.domain;
    // Without bridges of its own the tool visits every tunnel in --tunnels (another process
    // holds their bridges).
    const size_t used = options_.bridges > 0
                            ? std::min(tunnels_.size(), static_cast<size_t>(options_.bridges))
                            : tunnels_.size();
    plan.tunnels.assign(tunnels_.begin(), tunnels_.begin() + static_cast<ptrdiff_t>(used));
    inet_pton(AF_INET, options_.sourceBase.c_str(), &plan.sourceBase);
    plan.sources = options_.sources;
    plan.count = options_.visitors;
    plan.concurrency = options_.visitorConcurrency;
    plan.rounds = options_.visitorRounds;
    startVisitors(loop_, std::move(plan), [this](VisitorRun run) {
      std::lock_guard lock(mutex_);
      report_.visitorsCompleted = run.completed;
      report_.visitorsFailed = run.failed;
      report_.visitorSeconds = run.seconds;
      report_.visitorFirstByteMs = std::move(run.firstByteMs);
      visitorsDone_ = true;
    });
  }

  void enter(Phase phase, double now) {
    phase_ = phase;
    phaseStart_ = now;
  }

  void beginStorm(double now, bool signal) {
    // The storm's longest waits start from zero; the run's keep what came before.
    const WaitTally before = waitsNow();
    waitsAtStorm_ = before.count;
    longestBeforeStorm_ = before.longestMs;
    for (WaitCounters& kind : counters_.waits) kind.longestMs = 0;
    attachesAtStorm_ = counters_.attaches.load();
    failuresAtStorm_ = counters_.failures.load();
    fullAtStorm_ = counters_.handshakesFull.load();
    resumedAtStorm_ = counters_.handshakesResumed.load();
    stormOldPid_ = resolveRelayd();
    {
      std::lock_guard lock(mutex_);
      report_.storm.signalAt = now;
    }
    if (signal && stormOldPid_ > 0) {
      std::printf("sending SIGTERM to relayd (pid %d)\n", stormOldPid_.load());
      ::kill(stormOldPid_.load(), SIGTERM);
    }
    enter(Phase::kStorm, now);
  }

  WaitTally waitsNow() const {
    WaitTally tally;
    for (size_t k = 0; k < kWaitKinds; ++k) {
      tally.count[k] = counters_.waits[k].count.load();
      tally.longestMs[k] = counters_.waits[k].longestMs.load();
    }
    return tally;
  }
  WaitTally stormWaits() const {
    WaitTally tally = waitsNow();
    for (size_t k = 0; k < kWaitKinds; ++k) tally.count[k] -= waitsAtStorm_[k];
    return tally;
  }

  void finish() {
    if (phase_ == Phase::kDone) return;
    phase_ = Phase::kDone;
    for (auto& bridge : bridges_) bridge->stop();
    uv_close(reinterpret_cast<uv_handle_t*>(&tick_), nullptr);
    for (uv_signal_t& handle : signals_)
      if (!uv_is_closing(reinterpret_cast<uv_handle_t*>(&handle)))
        uv_close(reinterpret_cast<uv_handle_t*>(&handle), nullptr);
  }

  void sampleLoop() {
    std::optional<Sample> previous;
    std::printf("%s\n", sampleHeader().c_str());
    while (!stopSampler_) {
      Sample s;
      s.seconds = secondsSince(start_);
      s.phase = phase_.load();
      s.bridgesUp = counters_.bridgesUp.load();
      s.attaches = counters_.attaches.load();
      s.failures = counters_.failures.load();
      s.refusedBeforeTls = counters_.refusedBeforeTls.load();
      s.pingsAnswered = counters_.pingsAnswered.load();
      s.statusReports = counters_.statusReports.load();
      const pid_t relayd = resolveRelayd();
      if (auto r = sampleProcess(relayd)) {
        s.relaydUp = true;
        s.relaydPid = relayd;
        s.relaydCpuMicros = r->cpuMicros;
        s.relaydWorkerCpuMicros = r->handshakeWorkerCpuMicros;
        s.relaydRssKiB = r->rssKiB;
        s.relaydRunDelayMicros = r->runDelayMicros;
      }
      if (auto c = sampleProcess(resolveControld())) {
        s.controldUp = true;
        s.controldCpuMicros = c->cpuMicros;
        s.controldRssKiB = c->rssKiB;
      }
      if (auto self = sampleProcess(getpid())) s.toolCpuMicros = self->cpuMicros;
      // Nothing is shed while holding: there the scrape (a render of every metric in relayd)
      // comes every kHoldScrapeEvery samples, as from a Prometheus, not into the idle figure
      // once a second.
      const bool holding = s.phase == Phase::kHold || s.phase == Phase::kRest;
      const bool scrape = !holding || holdSamples_++ % kHoldScrapeEvery == 0;
      if (!options_.metrics.empty() && scrape) {
        if (auto shed = scrapeCounter(options_.metrics, "opentunnel_connections_shed_total",
                                      "reason=\"handshakes\""))
          s.shed = *shed;
      } else if (previous) {
        s.shed = previous->shed;
      }
      if (s.phase == Phase::kStorm) {
        std::lock_guard lock(mutex_);
        if (report_.storm.oldGoneAt < 0 && !sampleProcess(stormOldPid_))
          report_.storm.oldGoneAt = s.seconds;
        if (report_.storm.newSeenAt < 0 && s.relaydUp && relayd != stormOldPid_)
          report_.storm.newSeenAt = s.seconds;
        if (relayd != stormOldPid_ && s.shed >= 0) report_.storm.shedAtEnd = s.shed;
      }
      std::printf("%s\n", formatSampleLine(s, previous ? &*previous : nullptr).c_str());
      std::fflush(stdout);
      {
        std::lock_guard lock(mutex_);
        report_.samples.push_back(s);
      }
      previous = s;
      // Sample on whole seconds of the tool's clock.
      const double next = std::floor(secondsSince(start_)) + 1;
      while (!stopSampler_ && secondsSince(start_) < next)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  uv_loop_t* loop_;
  Options options_;
  BridgeTarget target_;
  static constexpr uint64_t kHoldScrapeEvery = 15;
  uint64_t holdSamples_ = 0;
  LoadCounters counters_;
  std::vector<std::unique_ptr<LoadBridge>> bridges_;
  int64_t started_ = 0;
  bool rested_ = false;    // the ramp's pause (--hold-low) is behind it
  double rampPaused_ = 0;  // seconds the ramp spent paused
  uv_timer_t tick_{};
  std::array<uv_signal_t, 4> signals_{};
  bool churnOn_ = false;
  double churnStart_ = 0;
  int64_t churnDone_ = 0;
  size_t churnNext_ = 0;
  std::atomic<Phase> phase_{Phase::kRamp};
  double phaseStart_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::thread sampler_;
  std::atomic<bool> stopSampler_{false};
  std::mutex mutex_;  // report_
  ReportInput report_;
  pid_t relaydPid_ = 0;
  std::atomic<pid_t> stormOldPid_{0};
  uint64_t attachesAtStorm_ = 0;
  uint64_t failuresAtStorm_ = 0;
  uint64_t fullAtStorm_ = 0;
  uint64_t resumedAtStorm_ = 0;
  std::array<uint64_t, kWaitKinds> waitsAtStorm_{};
  std::array<uint64_t, kWaitKinds> longestBeforeStorm_{};
  double firstAttach_ = -1;
  bool sawDrop_ = false;
  bool stormDone_ = false;
  std::vector<TunnelCredentials> tunnels_;
  bool visitorsStarted_ = false;
  bool visitorsDone_ = false;
};

std::vector<TunnelCredentials> readTunnels(const std::string& path) {
  std::vector<TunnelCredentials> tunnels;
  std::ifstream in(path);
  TunnelCredentials t;
  while (in >> t.id >> t.token) tunnels.push_back(t);
  return tunnels;
}

int runBare(uv_loop_t* loop, const Options& options) {
  sockaddr_in target{};
  if (!parseHostPort(options.bareTarget, target)) {
    std::fprintf(stderr, "bad --bare-target\n");
    return 2;
  }
  auto context = tls::makeClientContext(options.caFile, {"http/1.1"});
  if (!context) {
    std::fprintf(stderr, "TLS context: %s\n", context.error().message.c_str());
    return 2;
  }
  if (options.bareResume) tls::keepClientSessions(context.value().get());
  const char* kind = options.bareResume ? "resumed" : "full";
  const auto before = sampleProcess(options.barePid);
  const auto start = std::chrono::steady_clock::now();
  BareHandshakeRun result;
  startBareHandshakes(loop, target, options.domain, context.value(), options.bareHandshakes,
                      options.bareConcurrency, options.bareResume,
                      [&](const BareHandshakeRun& r) { result = r; });
  uv_run(loop, UV_RUN_DEFAULT);
  const double seconds = secondsSince(start);
  const auto after = sampleProcess(options.barePid);
  std::printf("bare TLS handshakes (%s): %" PRIu64 " done (%" PRIu64 " resumed), %" PRIu64
              " failed in %.1f s (%.0f/s)\n",
              kind, result.completed, result.resumed, result.failed, seconds,
              static_cast<double>(result.completed) / seconds);
  if (before && after && result.completed > 0)
    std::printf("bare TLS server CPU per %s handshake: %.0f us (pid %d)\n", kind,
                static_cast<double>(after->cpuMicros - before->cpuMicros) /
                    static_cast<double>(result.completed),
                options.barePid);
  return result.completed > 0 ? 0 : 1;
}

}  // namespace
}  // namespace ot::load

int main(int argc, char** argv) {
  using namespace ot::load;
  Options o;
  CLI::App app{"ot_bridge_load: bridges as otunnel opens them, and what relayd spends on them"};
  app.add_option("--relay", o.relay, "relayd's TLS listener, ip:port")->capture_default_str();
  app.add_option("--domain", o.domain, "the API domain (SNI, Host)")->capture_default_str();
  app.add_option("--ca-file", o.caFile, "the CA that signed relayd's certificate")->required();
  app.add_option("--tunnels", o.tunnelsFile, "file of `<id> <token>` lines (run_capacity.py)");
  app.add_option("--bridges", o.bridges, "bridges to open")->capture_default_str();
  app.add_option("--rate", o.rate, "attempts started per second while ramping")
      ->capture_default_str();
  app.add_option("--sources", o.sources, "loopback source addresses")->capture_default_str();
  app.add_option("--source-base", o.sourceBase, "the first source address")->capture_default_str();
  app.add_option("--hold", o.holdSeconds, "seconds to hold them idle")->capture_default_str();
  app.add_option("--hold-low", o.holdLowSeconds,
                 "seconds to pause the ramp at --mark-at and hold those bridges idle: the low "
                 "point of the idle CPU's slope (0: no pause)")
      ->capture_default_str();
  app.add_option("--mark-at", o.markAt, "bridges at the low point of the memory slope")
      ->capture_default_str();
  app.add_option("--storm", o.storm,
                 "after the hold: none, signal (SIGTERM relayd and wait "
                 "for a new one), wait (for the operator's restart)")
      ->check(CLI::IsMember({"none", "signal", "wait"}))
      ->capture_default_str();
  app.add_option("--storm-timeout", o.stormTimeoutSeconds, "give up on the storm after")
      ->capture_default_str();
  app.add_option("--relayd-pid", o.relaydPid, "relayd's pid");
  app.add_option("--relayd-pid-file", o.relaydPidFile, "a file holding relayd's pid (re-read)");
  app.add_option("--relayd-exe", o.relaydExe, "find relayd as the newest process of this binary");
  app.add_option("--controld-pid", o.controldPid, "controld's pid");
  app.add_option("--controld-exe", o.controldExe, "find controld by its binary");
  app.add_option("--metrics", o.metrics, "relayd's metrics listener, ip:port");
  app.add_option("--bare-handshakes", o.bareHandshakes,
                 "instead: this many bare TLS handshakes against --bare-target");
  app.add_option("--bare-target", o.bareTarget, "a bare TLS server, ip:port");
  app.add_option("--bare-pid", o.barePid, "its pid, for its CPU per handshake");
  app.add_option("--bare-concurrency", o.bareConcurrency, "handshakes at once")
      ->capture_default_str();
  app.add_flag("--bare-resume", o.bareResume,
               "resumed handshakes: each offers the session ticket of a first, uncounted one");
  app.add_option("--visitors", o.visitors,
                 "after the hold: this many visitors through the bridges (ClientHello echoed, "
                 "then 4 KiB round trips)")
      ->capture_default_str();
  app.add_option("--visitor-concurrency", o.visitorConcurrency, "visitors at once")
      ->capture_default_str();
  app.add_option("--visitor-rounds", o.visitorRounds, "4 KiB round trips per visitor")
      ->capture_default_str();
  app.add_option("--churn", o.churn,
                 "while holding: changes a second, each bridge detached and attached again at "
                 "once (two changes)")
      ->capture_default_str();
  app.add_flag("--churn-on-signal", o.churnOnSignal,
               "churn only between SIGUSR1 and SIGUSR2 (SIGTERM ends the run)");
  app.add_flag("--no-status-reports", o.noStatusReports,
               "send no `status` reports (otunnel sends one per link after attaching, then once "
               "a minute)");
  CLI11_PARSE(app, argc, argv);
  signal(SIGPIPE, SIG_IGN);

  uv_loop_t loop;
  uv_loop_init(&loop);
  if (o.bareHandshakes > 0) return runBare(&loop, o);

  const int64_t budget = descriptorBudget();
  if (o.bridges > budget) {
    std::printf("%" PRId64 " bridges need more descriptors than this process may open (%" PRId64
                "): measuring %" PRId64
                " and projecting the rest (see docs/capacity.md to "
                "raise the hard limit)\n",
                o.bridges, budget + 64, budget);
    o.bridges = budget;
  }
  const auto tunnels = readTunnels(o.tunnelsFile);
  if (tunnels.empty()) {
    std::fprintf(stderr, "no tunnels in --tunnels %s\n", o.tunnelsFile.c_str());
    return 2;
  }
  std::printf("%" PRId64 " bridges over %zu tunnels from %d source addresses at %.0f/s\n",
              o.bridges, tunnels.size(), o.sources, o.rate);
  auto tool = std::make_unique<Tool>(&loop, o);
  if (!tool->setUp(tunnels)) return 2;
  tool->run();
  uv_run(&loop, UV_RUN_DEFAULT);  // the last close callbacks
  tool.reset();
  uv_loop_close(&loop);
  return 0;
}
