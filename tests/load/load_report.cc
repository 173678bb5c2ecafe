#include "tests/load/load_report.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <optional>

namespace ot::load {
namespace {

const char* phaseName(Phase phase) {
  switch (phase) {
    case Phase::kRamp:
      return "ramp";
    case Phase::kRest:
      return "rest";
    case Phase::kHold:
      return "hold";
    case Phase::kVisitors:
      return "visit";
    case Phase::kStorm:
      return "storm";
    case Phase::kDone:
      return "done";
  }
  return "?";
}

struct Delta {
  double seconds = 0;
  double attaches = 0;
  double relaydCpu = 0;        // microseconds
  double relaydWorkerCpu = 0;  // of relaydCpu: its TLS handshake worker threads
  double controldCpu = 0;      // microseconds
  double relaydWait = 0;       // microseconds runnable but not running
  double pings = 0;
  double statusReports = 0;
};

// Sums consecutive deltas over samples accepted by `keep` (both ends must have the same relayd,
// so a restart's reset counters never count).
template <typename Keep>
Delta sumDeltas(const std::vector<Sample>& samples, Keep keep) {
  Delta total;
  for (size_t i = 1; i < samples.size(); ++i) {
    const Sample& a = samples[i - 1];
    const Sample& b = samples[i];
    if (!keep(a, b) || !a.relaydUp || !b.relaydUp || a.relaydPid != b.relaydPid) continue;
    total.seconds += b.seconds - a.seconds;
    total.attaches += static_cast<double>(b.attaches - a.attaches);
    total.relaydCpu += static_cast<double>(b.relaydCpuMicros - a.relaydCpuMicros);
    total.relaydWorkerCpu +=
        static_cast<double>(b.relaydWorkerCpuMicros) - static_cast<double>(a.relaydWorkerCpuMicros);
    total.relaydWait += static_cast<double>(b.relaydRunDelayMicros - a.relaydRunDelayMicros);
    if (a.controldUp && b.controldUp)
      total.controldCpu += static_cast<double>(b.controldCpuMicros - a.controldCpuMicros);
    total.pings += static_cast<double>(b.pingsAnswered - a.pingsAnswered);
    total.statusReports += static_cast<double>(b.statusReports - a.statusReports);
  }
  return total;
}

// relayd's CPU per attach on its TLS handshake workers apart from its other threads (the loop,
// gRPC's), when it has workers.
void printWorkerSplit(const char* when, const Delta& delta) {
  if (delta.attaches <= 0 || delta.relaydWorkerCpu <= 0) return;
  std::printf(
      "%s: of relayd's, %.0f us/attach on its TLS handshake workers, %.0f us/attach on its "
      "other threads (the loop, gRPC)\n",
      when, delta.relaydWorkerCpu / delta.attaches,
      (delta.relaydCpu - delta.relaydWorkerCpu) / delta.attaches);
}

void printWaits(const char* when, const WaitTally& waits) {
  auto at = [&](WaitKind kind) { return static_cast<size_t>(kind); };
  auto seconds = [&](WaitKind kind) {
    return static_cast<double>(waits.longestMs[at(kind)]) / 1000;
  };
  std::printf("%s: attempts ended busy %" PRIu64 " (longest wait scheduled %.2f s), broken %" PRIu64
              " (longest %.2f s); attached bridges ended or drained %" PRIu64
              " (longest wait %.2f s)\n",
              when, waits.count[at(WaitKind::kBusy)], seconds(WaitKind::kBusy),
              waits.count[at(WaitKind::kBroken)], seconds(WaitKind::kBroken),
              waits.count[at(WaitKind::kAfterAttached)], seconds(WaitKind::kAfterAttached));
}

}  // namespace

std::string sampleHeader() {
  return "    t phase  bridges  att/s  fail/s  shed(total)  relayd: cpu%   rss MiB  "
         "controld: cpu%  rss MiB  tool cpu%  relayd wait%";
}

std::string formatSampleLine(const Sample& now, const Sample* previous) {
  double attachRate = 0;
  double failRate = 0;
  double relaydCpu = 0;
  double controldCpu = 0;
  double toolCpu = 0;
  double relaydWait = 0;
  if (previous != nullptr && now.seconds > previous->seconds) {
    const double dt = now.seconds - previous->seconds;
    attachRate = static_cast<double>(now.attaches - previous->attaches) / dt;
    failRate = static_cast<double>(now.failures - previous->failures) / dt;
    if (now.relaydUp && previous->relaydUp && now.relaydPid == previous->relaydPid) {
      relaydCpu = static_cast<double>(now.relaydCpuMicros - previous->relaydCpuMicros) / dt / 1e4;
      relaydWait =
          static_cast<double>(now.relaydRunDelayMicros - previous->relaydRunDelayMicros) / dt / 1e4;
    }
    if (now.controldUp && previous->controldUp)
      controldCpu =
          static_cast<double>(now.controldCpuMicros - previous->controldCpuMicros) / dt / 1e4;
    toolCpu = static_cast<double>(now.toolCpuMicros - previous->toolCpuMicros) / dt / 1e4;
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "%5.0f %-5s %8" PRId64
                " %6.0f %7.0f %12.0f  %12.1f %9.1f  %14.1f %8.1f  %9.1f  %12.1f",
                now.seconds, phaseName(now.phase), now.bridgesUp, attachRate, failRate, now.shed,
                relaydCpu, now.relaydUp ? static_cast<double>(now.relaydRssKiB) / 1024 : 0.0,
                controldCpu, static_cast<double>(now.controldRssKiB) / 1024, toolCpu, relaydWait);
  return line;
}

double idleByTwoPoints(int64_t lowBridges, double lowPercent, int64_t highBridges,
                       double highPercent, int64_t bridges) {
  if (highBridges <= lowBridges) return highPercent;
  const double perBridge =
      (highPercent - lowPercent) / static_cast<double>(highBridges - lowBridges);
  return highPercent + perBridge * static_cast<double>(bridges - highBridges);
}

void printReport(const ReportInput& in) {
  const auto& s = in.samples;
  std::printf("\n== summary (%" PRId64 " bridges asked) ==\n", in.bridges);
  if (s.empty()) return;

  // Memory: relayd RSS at the first sample with >= markAt bridges and at the first hold sample.
  std::optional<Sample> low;
  std::optional<Sample> high;
  for (const Sample& x : s) {
    if (!low && (x.phase == Phase::kRamp || x.phase == Phase::kRest) && x.bridgesUp >= in.markAt &&
        x.relaydUp)
      low = x;
    if (!high && x.phase == Phase::kHold && x.relaydUp) high = x;
  }
  double slopeKiB = -1;
  if (low && high && high->bridgesUp > low->bridgesUp) {
    slopeKiB = static_cast<double>(static_cast<int64_t>(high->relaydRssKiB) -
                                   static_cast<int64_t>(low->relaydRssKiB)) /
               static_cast<double>(high->bridgesUp - low->bridgesUp);
    std::printf("relayd memory per idle bridge: %.1f KiB (RSS %.1f MiB at %" PRId64
                " bridges -> %.1f MiB at %" PRId64 ")\n",
                slopeKiB, static_cast<double>(low->relaydRssKiB) / 1024, low->bridgesUp,
                static_cast<double>(high->relaydRssKiB) / 1024, high->bridgesUp);
  }
  if (high && in.relaydRssBeforeKiB > 0 && high->bridgesUp > 0)
    std::printf("relayd memory per bridge from empty: %.1f KiB (RSS %.1f MiB before the first)\n",
                static_cast<double>(high->relaydRssKiB - in.relaydRssBeforeKiB) /
                    static_cast<double>(high->bridgesUp),
                static_cast<double>(in.relaydRssBeforeKiB) / 1024);

  // CPU per attach over the ramp, and controld's by bands of live bridges.
  const Delta ramp =
      sumDeltas(s, [](const Sample&, const Sample& b) { return b.phase == Phase::kRamp; });
  if (ramp.attaches > 0)
    std::printf(
        "ramp: %.0f attaches in %.0f s (%.0f/s); relayd %.0f us/attach (%.0f%% of a core), "
        "controld %.0f us/attach\n",
        ramp.attaches, ramp.seconds, ramp.attaches / ramp.seconds, ramp.relaydCpu / ramp.attaches,
        ramp.relaydCpu / ramp.seconds / 1e4, ramp.controldCpu / ramp.attaches);
  printWorkerSplit("ramp", ramp);
  constexpr int64_t kBand = 5000;
  for (int64_t from = 0; from < in.bridges; from += kBand) {
    const Delta band = sumDeltas(s, [from](const Sample& a, const Sample& b) {
      return b.phase == Phase::kRamp && a.bridgesUp >= from && a.bridgesUp < from + kBand;
    });
    if (band.attaches < 100) continue;
    std::printf("  live bridges %6" PRId64 "-%6" PRId64
                ": relayd %5.0f us/attach, controld %5.0f "
                "us/attach (%.0f attaches)\n",
                from, from + kBand, band.relaydCpu / band.attaches,
                band.controldCpu / band.attaches, band.attaches);
  }

  // Idle: the hold phase, only stretches with no attach at all.
  const Delta idle = sumDeltas(s, [](const Sample& a, const Sample& b) {
    return b.phase == Phase::kHold && b.attaches == a.attaches;
  });
  double idleCorePercent = -1;
  // The same at the ramp's pause (--hold-low), for the slope.
  std::optional<Sample> rest;
  for (const Sample& x : s)
    if (x.phase == Phase::kRest && x.relaydUp) rest = x;
  const Delta idleLow = sumDeltas(s, [](const Sample& a, const Sample& b) {
    return a.phase == Phase::kRest && b.phase == Phase::kRest && b.attaches == a.attaches;
  });
  double idleLowPercent = -1;
  if (idleLow.seconds > 0 && rest) {
    idleLowPercent = idleLow.relaydCpu / idleLow.seconds / 1e4;
    std::printf("idle at the ramp's pause: relayd %.2f%% of a core for %" PRId64
                " bridges over %.0f s (%.0f pings answered, %.1f us of relayd CPU per ping/pong)\n",
                idleLowPercent, rest->bridgesUp, idleLow.seconds, idleLow.pings,
                idleLow.pings > 0 ? idleLow.relaydCpu / idleLow.pings : 0.0);
  }
  if (idle.seconds > 0 && high) {
    idleCorePercent = idle.relaydCpu / idle.seconds / 1e4;
    std::printf("idle: relayd %.2f%% of a core for %" PRId64
                " bridges over %.0f s "
                "(%.0f pings answered, %.0f status reports sent: %.1f us of relayd CPU per "
                "ping/pong, the reports' share included); controld %.2f%%\n",
                idleCorePercent, high->bridgesUp, idle.seconds, idle.pings, idle.statusReports,
                idle.pings > 0 ? idle.relaydCpu / idle.pings : 0.0,
                idle.controldCpu / idle.seconds / 1e4);
  }

  if (in.visitorsCompleted + in.visitorsFailed > 0) {
    std::vector<double> ms = in.visitorFirstByteMs;
    std::sort(ms.begin(), ms.end());
    auto pick = [&](double q) {
      return ms.empty() ? 0.0
                        : ms[std::min(ms.size() - 1,
                                      static_cast<size_t>(q * static_cast<double>(ms.size())))];
    };
    const Delta visit =
        sumDeltas(s, [](const Sample&, const Sample& b) { return b.phase == Phase::kVisitors; });
    std::printf("visitors: %" PRIu64 " echoed, %" PRIu64
                " failed in %.1f s (%.0f/s); first byte "
                "back p50 %.2f ms, p99 %.2f ms; relayd %.0f us per visitor\n",
                in.visitorsCompleted, in.visitorsFailed, in.visitorSeconds,
                static_cast<double>(in.visitorsCompleted) / std::max(in.visitorSeconds, 1e-9),
                pick(0.5), pick(0.99),
                in.visitorsCompleted > 0
                    ? visit.relaydCpu / static_cast<double>(in.visitorsCompleted)
                    : 0.0);
  }

  std::printf("run: TLS handshakes %" PRIu64 " full, %" PRIu64 " resumed\n", in.handshakesFull,
              in.handshakesResumed);
  printWaits("run", in.waits);
  if (in.waits.count[static_cast<size_t>(WaitKind::kBroken)] > 0) {
    // In client::AttemptEnd::Cause's order.
    static constexpr const char* kCauses[kAttemptCauses] = {
        "connect failed", "closed in the TLS handshake",
        "TLS failed",     "upgrade refused",
        "closed",         "drain",
        "attach_error",   "other"};
    std::printf("run: broken attempts by how they ended:");
    for (size_t c = 0; c < kAttemptCauses; ++c)
      if (in.brokenBy[c] > 0) std::printf(" %s %" PRIu64 ",", kCauses[c], in.brokenBy[c]);
    std::printf(" (the 10 s attach deadline: %" PRIu64 ")\n", in.deadlines);
  }
  if (in.fatal > 0)
    std::printf("run: %" PRIu64
                " bridges stopped on an answer otunnel gives up on (bad_token, "
                "invalid_route, HTTP 400/404/405/426)\n",
                in.fatal);

  const StormTimes& st = in.storm;
  if (st.signalAt >= 0) {
    auto since = [&](double t) { return t >= 0 ? t - st.signalAt : -1.0; };
    std::printf(
        "storm: old relayd gone %.1f s after the signal, new one seen at %.1f s, first "
        "attach at %.1f s, ",
        since(st.oldGoneAt), since(st.newSeenAt), since(st.firstAttachAt));
    if (st.allBackAt >= 0)
      std::printf("all back at %.1f s (%.1f s after the new relayd appeared)\n",
                  since(st.allBackAt), st.allBackAt - st.newSeenAt);
    else
      std::printf("NOT all back when the tool gave up\n");
    std::printf("storm: %" PRIu64 " failed attempts, handshakes shed by the new relayd: %.0f\n",
                st.failures, st.shedAtEnd);
    std::printf("storm: TLS handshakes %" PRIu64 " full, %" PRIu64 " resumed\n", st.handshakesFull,
                st.handshakesResumed);
    printWaits("storm", st.waits);
    // The new relayd only: the old one's drain is not the storm's cost.
    int oldPid = 0;
    for (const Sample& x : s)
      if (x.phase == Phase::kStorm) {
        oldPid = x.relaydPid;
        break;
      }
    const Delta storm = sumDeltas(s, [&](const Sample& a, const Sample& b) {
      return b.phase == Phase::kStorm && a.relaydPid != oldPid;
    });
    // Beside the ramp's: the storm's attaches resume (when tickets survive the restart), the
    // ramp's are full handshakes. Includes what the new relayd spent on shed attempts.
    if (storm.attaches > 0)
      std::printf("storm: new relayd %.0f us/attach over %.0f attaches (ramp: %.0f us/attach)\n",
                  storm.relaydCpu / storm.attaches, storm.attaches,
                  ramp.attaches > 0 ? ramp.relaydCpu / ramp.attaches : 0.0);
    printWorkerSplit("storm", storm);
    if (storm.seconds > 0)
      std::printf(
          "storm: new relayd busy %.0f%% of a core on average while bridges came back, "
          "and runnable but waiting for a CPU %.0f%% of the time (a shared box)\n",
          storm.relaydCpu / storm.seconds / 1e4, storm.relaydWait / storm.seconds / 1e4);
  }

  if (slopeKiB > 0 && high) {
    for (const int64_t n : {int64_t{50'000}, int64_t{100'000}}) {
      const double rss = static_cast<double>(high->relaydRssKiB) +
                         slopeKiB * static_cast<double>(n - high->bridgesUp);
      std::printf("projected for %" PRId64 " bridges: relayd RSS %.0f MiB", n, rss / 1024);
      if (idleCorePercent >= 0)
        std::printf(", idle %.1f%% of a core", idleCorePercent * static_cast<double>(n) /
                                                   static_cast<double>(high->bridgesUp));
      if (idleCorePercent >= 0 && idleLowPercent >= 0 && rest && high->bridgesUp > rest->bridgesUp)
        std::printf(
            " (%.1f%% on the slope from %" PRId64 " to %" PRId64 " bridges)",
            idleByTwoPoints(rest->bridgesUp, idleLowPercent, high->bridgesUp, idleCorePercent, n),
            rest->bridgesUp, high->bridgesUp);
      std::printf(", %" PRId64 " descriptors in relayd and in the load tool (projected)\n", n + 64);
    }
  }
  std::fflush(stdout);
}

}  // namespace ot::load
