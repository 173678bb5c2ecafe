// The ACME issuance metrics (every label value registered up front, so each series is scraped as
// 0 before it first moves):
//   opentunnel_acme_attempts_total{kind,outcome}             counter
//   opentunnel_acme_failures_total{kind,class}               counter
//   opentunnel_acme_issuance_duration_seconds{kind,outcome}  histogram
//   opentunnel_acme_cooldowns_total                          counter
// hookInto() wires attempt()/failure() into a JobRunnerConfig and cooldown() into the CA
// cool-down gate's options, as ControldServer does (and the tests, so they count what production
// counts). Any thread; the Metrics object must outlive this one, and this one the runner and gate.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/histogram.h>

#include <array>
#include <map>
#include <string>

#include "common/metrics.h"
#include "controld/issuance/ca_cooldown_gate.h"
#include "controld/issuance/issuer.h"
#include "controld/issuance/job_runner.h"
#include "controld/store/store.h"

namespace ot::controld {

class AcmeMetrics {
 public:
  explicit AcmeMetrics(metrics::Metrics& metrics);

  void attempt(JobKind kind, JobOutcome outcome, double seconds);
  void failure(JobKind kind, const FailureDetail& detail);
  void cooldown() { cooldowns_.Increment(); }

  void hookInto(JobRunnerConfig& config);
  void hookInto(CaCooldownGateOptions& options);

  // The outcome label of a job outcome; nullptr for outcomes that are not counted.
  [[nodiscard]] static const char* outcomeLabel(JobOutcome outcome);

 private:
  static constexpr std::array<const char*, 3> kKinds{"issue", "renew", "server"};
  static constexpr std::array<const char*, 5> kOutcomes{"success", "retry", "failed", "abandoned",
                                                        "refused"};
  static constexpr std::array<const char*, 11> kClasses{
      "network",   "timeout",       "http_5xx", "http_429", "bad_body", "nonce",
      "bad_nonce", "authz_pending", "dns",      "rejected", "other"};

  std::map<std::string, prometheus::Counter*> attempts_;     // "kind/outcome"
  std::map<std::string, prometheus::Histogram*> durations_;  // "kind/outcome"
  std::map<std::string, prometheus::Counter*> failures_;     // "kind/class"
  prometheus::Counter& cooldowns_;
};

}  // namespace ot::controld
