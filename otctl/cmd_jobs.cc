// otctl jobs list|retry: the certificate jobs, and putting a failed one back to pending.
#include <cstdio>
#include <memory>

#include "otctl/commands.h"
#include "otctl/exit_codes.h"
#include "otctl/output.h"

namespace ot::otctl {
namespace {

int listJobs(Client& client, const std::string& status) {
  av1::ListJobsRequest request;
  request.set_page_size(500);
  request.set_status(status);
  Table table({{"JOB", 24},
               {"KIND", 6},
               {"TUNNEL", 12},
               {"STATUS", 9},
               {"ATTEMPTS", 0},
               {"NEXT RUN", 20},
               {"LAST ERROR", 0}});
  JsonArray json;
  uint64_t shown = 0;
  while (true) {
    av1::ListJobsResponse page;
    const grpc::Status called = client.stub().ListJobs(client.context().get(), request, &page);
    if (!called.ok()) {
      if (client.options().json) json.end();
      return client.fail("jobs list", called);
    }
    for (const av1::JobSummary& job : page.jobs()) {
      ++shown;
      if (client.options().json) {
        json.item(toJson(job));
      } else {
        table.row({job.job_id(), job.kind(), job.tunnel_id().empty() ? "-" : job.tunnel_id(),
                   job.status(), std::to_string(job.attempts()),
                   formatTime(job.next_run_at_unix_ms()), job.last_error()});
      }
    }
    if (page.next_page_token().empty()) break;
    request.set_page_token(page.next_page_token());
  }
  if (client.options().json) {
    json.end();
  } else if (shown == 0) {
    std::printf("no jobs\n");
  }
  return kExitOk;
}

int retryJob(Client& client, const std::string& id) {
  av1::RetryJobRequest request;
  request.set_job_id(id);
  av1::RetryJobResponse response;
  const grpc::Status status = client.stub().RetryJob(client.context().get(), request, &response);
  if (!status.ok()) return client.fail("jobs retry", status);
  if (client.options().json) {
    std::printf("%s\n", toJson(response).c_str());
  } else {
    std::printf("job %s is pending again\n", id.c_str());
  }
  return kExitOk;
}

}  // namespace

void addJobCommands(CLI::App& app, Action& action) {
  CLI::App* jobs = app.add_subcommand("jobs", "certificate jobs");
  jobs->require_subcommand(1);
  auto status = std::make_shared<std::string>();
  CLI::App* list = jobs->add_subcommand("list", "jobs in ID order");
  list->add_option("--status", *status, "only this status")
      ->check(CLI::IsMember({"pending", "done", "failed", "abandoned"}));
  list->callback([&action, status] {
    action = [status](Client& client) { return listJobs(client, *status); };
  });
  auto id = std::make_shared<std::string>();
  CLI::App* retry = jobs->add_subcommand("retry", "put a failed job back to pending, due now");
  retry->add_option("id", *id, "the job's ID")->required();
  retry->callback(
      [&action, id] { action = [id](Client& client) { return retryJob(client, *id); }; });
}

}  // namespace ot::otctl
