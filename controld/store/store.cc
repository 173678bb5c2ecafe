#include "controld/store/store.h"

#include <array>
#include <utility>

namespace ot::controld {
namespace {

// The names are what the jobs table stores, so they never change once written.
constexpr std::array<std::pair<JobKind, const char*>, 3> kJobKinds = {{
    {JobKind::kIssue, "issue"},
    {JobKind::kRenew, "renew"},
    {JobKind::kServer, "server"},
}};
constexpr std::array<std::pair<JobStatus, const char*>, 4> kJobStatuses = {{
    {JobStatus::kPending, "pending"},
    {JobStatus::kDone, "done"},
    {JobStatus::kFailed, "failed"},
    {JobStatus::kAbandoned, "abandoned"},
}};

}  // namespace

const char* jobKindName(JobKind kind) {
  for (const auto& [value, name] : kJobKinds) {
    if (value == kind) return name;
  }
  return "issue";
}

const char* jobStatusName(JobStatus status) {
  for (const auto& [value, name] : kJobStatuses) {
    if (value == status) return name;
  }
  return "pending";
}

std::optional<JobKind> parseJobKind(std::string_view name) {
  for (const auto& [value, text] : kJobKinds) {
    if (name == text) return value;
  }
  return std::nullopt;
}

std::optional<JobStatus> parseJobStatus(std::string_view name) {
  for (const auto& [value, text] : kJobStatuses) {
    if (name == text) return value;
  }
  return std::nullopt;
}

Job pendingJob(JobKind kind, std::string id, std::string tunnelId, int64_t nowMs) {
  Job job;
  job.id = std::move(id);
  job.kind = kind;
  job.tunnelId = std::move(tunnelId);
  job.status = JobStatus::kPending;
  job.queuedAtMs = nowMs;
  job.nextRunAtMs = nowMs;
  return job;
}

std::string jobHostname(const Job& job, const std::string& domain) {
  if (job.kind == JobKind::kServer) return domain;
  if (job.tunnelId.empty()) return {};
  return job.tunnelId + "." + domain;
}

}  // namespace ot::controld
