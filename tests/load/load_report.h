// The load tool's once-a-second samples and what is computed from them at the end: memory per
// bridge (slope between two bridge counts), relayd and controld CPU per attach (by bands of live
// bridges), idle CPU while holding, and the storm's times; projections to 50,000 and 100,000
// bridges from the measured slopes, printed as "projected". Pure arithmetic over the samples.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/load/load_counters.h"

namespace ot::load {

// kRest: the ramp paused at the memory slope's low point (--hold-low), a first idle figure.
enum class Phase : uint8_t { kRamp, kRest, kHold, kVisitors, kStorm, kDone };

struct Sample {
  double seconds = 0;  // since the tool started
  Phase phase = Phase::kRamp;
  int64_t bridgesUp = 0;
  uint64_t attaches = 0;
  uint64_t failures = 0;
  uint64_t refusedBeforeTls = 0;
  uint64_t pingsAnswered = 0;
  uint64_t statusReports = 0;
  bool relaydUp = false;
  int relaydPid = 0;
  uint64_t relaydCpuMicros = 0;
  uint64_t relaydWorkerCpuMicros = 0;  // of relaydCpuMicros: its TLS handshake workers
  uint64_t relaydRssKiB = 0;
  uint64_t relaydRunDelayMicros = 0;  // runnable, waiting for a CPU (schedstat)
  bool controldUp = false;
  uint64_t controldCpuMicros = 0;
  uint64_t controldRssKiB = 0;
  uint64_t toolCpuMicros = 0;  // the load tool itself: a starved tool would slow the ramp
  double shed = -1;  // opentunnel_connections_shed_total{reason="handshakes"}; -1: no scrape
};

// Reconnect waits by kind (WaitKind): how many were scheduled and the longest of each.
struct WaitTally {
  std::array<uint64_t, kWaitKinds> count{};
  std::array<uint64_t, kWaitKinds> longestMs{};
};

struct StormTimes {
  double signalAt = -1;            // SIGTERM sent (or the drop noticed)
  double oldGoneAt = -1;           // the old relayd exited
  double newSeenAt = -1;           // a new relayd process appeared
  double firstAttachAt = -1;       // the first attach after the signal
  double allBackAt = -1;           // every bridge attached again
  WaitTally waits;                 // the waits scheduled from the signal until all were back
  double shedAtEnd = -1;           // the new relayd's shed counter when all were back
  uint64_t failures = 0;           // failed attempts during the storm
  uint64_t handshakesFull = 0;     // TLS handshakes completed in full during the storm
  uint64_t handshakesResumed = 0;  // ... and resumed from a session ticket
};

struct ReportInput {
  int64_t bridges = 0;  // what was asked for
  int64_t markAt = 0;   // the lower point of the memory slope
  std::vector<Sample> samples;
  StormTimes storm;
  WaitTally waits;     // the whole run
  uint64_t fatal = 0;  // bridges stopped on an answer otunnel gives up on
  std::array<uint64_t, kAttemptCauses> brokenBy{};  // broken attempts by AttemptEnd::Cause
  uint64_t deadlines = 0;                           // of which the 10 s attach deadline
  uint64_t handshakesFull = 0;      // TLS handshakes completed in full, the whole run
  uint64_t handshakesResumed = 0;   // ... resumed from the relay's session ticket
  uint64_t relaydRssBeforeKiB = 0;  // before the first bridge
  // --visitors: how many completed / failed, in how long, and their times to the first byte back.
  uint64_t visitorsCompleted = 0;
  uint64_t visitorsFailed = 0;
  double visitorSeconds = 0;
  std::vector<double> visitorFirstByteMs;
};

// relayd's idle CPU (per cent of a core) at `bridges`, on the line through two measured points
// (a fixed part, such as the wheel's ticks and gRPC's threads, and a part per bridge), rather
// than through zero: the slope measured, as the memory figure is.
[[nodiscard]] double idleByTwoPoints(int64_t lowBridges, double lowPercent, int64_t highBridges,
                                     double highPercent, int64_t bridges);

// Prints the summary block to stdout.
void printReport(const ReportInput& input);

// One line per sample (the live view).
[[nodiscard]] std::string formatSampleLine(const Sample& now, const Sample* previous);
[[nodiscard]] std::string sampleHeader();

}  // namespace ot::load
