#include "controld/acme/acme_metrics.h"

#include <string_view>

namespace ot::controld {
namespace {

constexpr const char* kAttempts = "opentunnel_acme_attempts_total";
constexpr const char* kFailures = "opentunnel_acme_failures_total";
constexpr const char* kDuration = "opentunnel_acme_issuance_duration_seconds";

std::string key(std::string_view a, std::string_view b) {
  return std::string(a) + "/" + std::string(b);
}

}  // namespace

AcmeMetrics::AcmeMetrics(metrics::Metrics& metrics)
    : cooldowns_(metrics.counter("opentunnel_acme_cooldowns_total",
                                 "CA cool-downs this machine started.")) {
  const prometheus::Histogram::BucketBoundaries buckets{0.1, 0.5, 1,   2.5, 5,  10,
                                                        30,  60,  120, 300, 600};
  for (const char* kind : kKinds) {
    for (const char* outcome : kOutcomes) {
      attempts_[key(kind, outcome)] =
          &metrics.counter(kAttempts, "Certificate issuance attempts, by job kind and outcome.",
                           {{"kind", kind}, {"outcome", outcome}});
      durations_[key(kind, outcome)] =
          &metrics.histogram(kDuration, "Length of one certificate issuance attempt.", buckets,
                             {{"kind", kind}, {"outcome", outcome}});
    }
    for (const char* failureClass : kClasses) {
      failures_[key(kind, failureClass)] =
          &metrics.counter(kFailures, "Failed certificate issuance attempts, by failure class.",
                           {{"kind", kind}, {"class", failureClass}});
    }
  }
}

const char* AcmeMetrics::outcomeLabel(JobOutcome outcome) {
  switch (outcome) {
    case JobOutcome::kDone:
      return "success";
    case JobOutcome::kRetry:
      return "retry";
    case JobOutcome::kFailed:
      return "failed";
    case JobOutcome::kAbandoned:
      return "abandoned";
    case JobOutcome::kRefused:
      return "refused";
    case JobOutcome::kDeferred:
    case JobOutcome::kDropped:
      return nullptr;
  }
  return nullptr;
}

void AcmeMetrics::attempt(JobKind kind, JobOutcome outcome, double seconds) {
  const char* label = outcomeLabel(outcome);
  if (label == nullptr) return;
  const std::string name = key(jobKindName(kind), label);
  if (auto found = attempts_.find(name); found != attempts_.end()) found->second->Increment();
  if (auto found = durations_.find(name); found != durations_.end()) {
    found->second->Observe(seconds);
  }
}

void AcmeMetrics::hookInto(JobRunnerConfig& config) {
  config.onAttempt = [this](JobKind kind, JobOutcome outcome, double seconds) {
    attempt(kind, outcome, seconds);
  };
  config.onFailure = [this](JobKind kind, const FailureDetail& detail) { failure(kind, detail); };
}

void AcmeMetrics::hookInto(CaCooldownGateOptions& options) {
  options.onStarted = [this] { cooldown(); };
}

void AcmeMetrics::failure(JobKind kind, const FailureDetail& detail) {
  auto found = failures_.find(key(jobKindName(kind), detail.reason));
  if (found == failures_.end()) found = failures_.find(key(jobKindName(kind), "other"));
  if (found != failures_.end()) found->second->Increment();
}

}  // namespace ot::controld
