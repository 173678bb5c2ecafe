// Storage: renewal alarms and job leases across several stores (several controlds on one
// database), on SQLite and MariaDB.
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "tests/controld/test_database.h"

namespace ot::controld {
namespace {

using testing::sampleTunnel;
using testing::testDatabases;

constexpr int64_t kJobsNow = 1'750'000'000'000;

Job pendingJob(const std::string& id, JobKind kind, int64_t nextRunAtMs) {
  Job job;
  job.id = id;
  job.kind = kind;
  job.tunnelId = kind == JobKind::kServer ? "" : "t" + id;
  job.queuedAtMs = kJobsNow - 1000;
  job.nextRunAtMs = nextRunAtMs;
  return job;
}

TEST_CASE("store: each due alarm fires once across two stores racing in two threads") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto first = db->openMigrated();
    auto second = db->open();

    std::set<std::string> due;
    for (int i = 0; i < 12; ++i) {
      TunnelRecord record = sampleTunnel("due" + std::to_string(i));
      record.renewAtMs = kJobsNow - 1000 + i;
      REQUIRE(first->insertTunnel(record).ok());
      due.insert(record.id);
    }
    TunnelRecord future = sampleTunnel("future");
    future.renewAtMs = kJobsNow + 60'000;
    REQUIRE(first->insertTunnel(future).ok());
    TunnelRecord gone = sampleTunnel("gone");
    gone.renewAtMs = kJobsNow - 5000;
    gone.deletedAtMs = kJobsNow - 4000;
    REQUIRE(first->insertTunnel(gone).ok());
    REQUIRE(first->insertTunnel(sampleTunnel("noalarm")).ok());

    std::mutex mutex;
    std::map<std::string, int> fired;
    auto runner = [&](SqlStore& store) {
      for (;;) {
        // A small page, so both runners read the same rows and race for them.
        // CHECK, not REQUIRE: a failure must be reported from this thread, not end the process.
        auto alarms = store.dueAlarms(kJobsNow, 3);
        CHECK(alarms.ok());
        if (!alarms.ok() || alarms->empty()) return;
        for (const auto& tunnel : *alarms) {
          CHECK(tunnel.record.renewAtMs.has_value());
          if (!tunnel.record.renewAtMs) return;
          auto cleared = store.clearAlarm(tunnel.record.id, *tunnel.record.renewAtMs);
          CHECK(cleared.ok());
          if (!cleared.ok()) return;
          if (cleared.value()) {
            std::lock_guard lock(mutex);
            ++fired[tunnel.record.id];
          }
        }
      }
    };
    std::thread a([&] { runner(*first); });
    std::thread b([&] { runner(*second); });
    a.join();
    b.join();

    CHECK(fired.size() == due.size());
    for (const auto& id : due) {
      CAPTURE(id);
      CHECK(fired[id] == 1);
    }
    // Clearing left the records and revisions alone; the future alarm is still set.
    auto record = first->getTunnel("due0");
    REQUIRE(record.ok());
    CHECK((*record)->revision == 1);
    CHECK(first->clearAlarm("due0", kJobsNow - 1000).value() == false);
    auto later = first->dueAlarms(kJobsNow + 60'000, 10);
    REQUIRE(later.ok());
    REQUIRE(later->size() == 1);
    CHECK(later->front().record.id == "future");
  }
}

TEST_CASE("store: jobs are added once and read back whole") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    Job job = pendingJob("cert-1", JobKind::kRenew, kJobsNow);
    job.attempts = 2;
    job.lastError = "ACME said no";
    CHECK(store->addJob(job).value() == true);
    Job again = job;
    again.kind = JobKind::kIssue;
    CHECK(db->open()->addJob(again).value() == false);

    auto loaded = store->getJob("cert-1");
    REQUIRE(loaded.ok());
    REQUIRE(loaded->has_value());
    const Job& read = **loaded;
    CHECK(read.id == "cert-1");
    CHECK(read.kind == JobKind::kRenew);
    CHECK(read.tunnelId == "tcert-1");
    CHECK(read.status == JobStatus::kPending);
    CHECK(read.attempts == 2);
    CHECK(read.queuedAtMs == kJobsNow - 1000);
    CHECK(read.nextRunAtMs == kJobsNow);
    CHECK(read.leaseOwner.empty());
    CHECK(read.leaseUntilMs == 0);
    CHECK(read.lastError == "ACME said no");
    CHECK_FALSE(store->getJob("cert-2").value().has_value());
    CHECK(store->countJobs(JobStatus::kPending, 0).value() == 1);
  }
}

TEST_CASE("store: 30 jobs on two stores in two threads each run exactly once") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto first = db->openMigrated();
    auto second = db->open();
    constexpr int kJobs = 30;
    for (int i = 0; i < kJobs; ++i) {
      const JobKind kind =
          i % 3 == 0 ? JobKind::kIssue : (i % 3 == 1 ? JobKind::kRenew : JobKind::kServer);
      REQUIRE(first->addJob(pendingJob("job" + std::to_string(i), kind, kJobsNow - i)).ok());
    }

    std::mutex mutex;
    std::map<std::string, std::vector<std::string>> runs;  // job -> owners that ran it
    auto runner = [&](SqlStore& store, const std::string& owner) {
      for (;;) {
        auto claimed = store.claimJob(owner, kJobsNow, 120'000, true);
        CHECK(claimed.ok());  // not REQUIRE: this runs on its own thread
        if (!claimed.ok() || !claimed->has_value()) return;
        Job job = **claimed;
        CHECK(job.leaseOwner == owner);
        CHECK(job.leaseUntilMs == kJobsNow + 120'000);
        CHECK(job.attempts == 1);
        {
          std::lock_guard lock(mutex);
          runs[job.id].push_back(owner);
        }
        job.status = JobStatus::kDone;
        auto finished = store.finishJob(job, owner);
        CHECK(finished.ok());
        if (!finished.ok()) return;
        CHECK(finished.value() == true);
      }
    };
    std::thread a([&] { runner(*first, "machine-a"); });
    std::thread b([&] { runner(*second, "machine-b"); });
    a.join();
    b.join();

    CHECK(runs.size() == kJobs);
    for (const auto& run : runs) {
      CAPTURE(run.first);
      CHECK(run.second.size() == 1);
    }
    CHECK(first->countJobs(JobStatus::kDone, 0).value() == kJobs);
    CHECK(first->countJobs(JobStatus::kPending, 0).value() == 0);
  }
}

TEST_CASE("store: claims prefer renewals and server jobs, and can skip first issuance") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    REQUIRE(store->addJob(pendingJob("issue-old", JobKind::kIssue, kJobsNow - 50'000)).ok());
    REQUIRE(store->addJob(pendingJob("renew-new", JobKind::kRenew, kJobsNow - 10)).ok());
    REQUIRE(store->addJob(pendingJob("server", JobKind::kServer, kJobsNow - 20)).ok());
    REQUIRE(store->addJob(pendingJob("renew-later", JobKind::kRenew, kJobsNow + 5000)).ok());

    auto claim = [&](bool includeIssue) -> std::string {
      auto claimed = store->claimJob("me", kJobsNow, 60'000, includeIssue);
      REQUIRE(claimed.ok());
      return claimed->has_value() ? (*claimed)->id : "";
    };
    CHECK(claim(false) == "server");  // due earlier than renew-new
    CHECK(claim(false) == "renew-new");
    CHECK(claim(false) == "");  // only first issuance is due, and it is excluded
    CHECK(claim(true) == "issue-old");
    CHECK(claim(true) == "");  // renew-later is not due yet
  }
}

TEST_CASE("store: an expired lease is taken over and the old holder can no longer finish") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto a = db->openMigrated();
    auto b = db->open();
    REQUIRE(a->addJob(pendingJob("renew-1", JobKind::kRenew, kJobsNow)).ok());

    auto first = a->claimJob("machine-a", kJobsNow, 1000, true);
    REQUIRE(first.ok());
    REQUIRE(first->has_value());
    CHECK((*first)->attempts == 1);

    // Still leased: nobody else gets it, and only the holder may extend it.
    CHECK_FALSE(b->claimJob("machine-b", kJobsNow + 500, 1000, true).value().has_value());
    CHECK(b->extendLease("renew-1", "machine-b", kJobsNow + 5000).value() == false);
    CHECK(a->extendLease("renew-1", "machine-a", kJobsNow + 1500).value() == true);
    CHECK_FALSE(b->claimJob("machine-b", kJobsNow + 1200, 1000, true).value().has_value());

    // machine-a stopped extending (crashed): at kJobsNow + 1500 the lease is over.
    auto taken = b->claimJob("machine-b", kJobsNow + 1500, 1000, true);
    REQUIRE(taken.ok());
    REQUIRE(taken->has_value());
    CHECK((*taken)->leaseOwner == "machine-b");
    CHECK((*taken)->attempts == 2);

    Job late = **first;
    late.status = JobStatus::kFailed;
    late.lastError = "from the old holder";
    CHECK(a->finishJob(late, "machine-a").value() == false);
    CHECK(a->extendLease("renew-1", "machine-a", kJobsNow + 9000).value() == false);

    Job done = **taken;
    done.status = JobStatus::kDone;
    CHECK(b->finishJob(done, "machine-b").value() == true);
    auto finalState = a->getJob("renew-1");
    REQUIRE(finalState.ok());
    CHECK((*finalState)->status == JobStatus::kDone);
    CHECK((*finalState)->lastError.empty());
    CHECK((*finalState)->leaseOwner.empty());
  }
}

TEST_CASE("store: finishJob by a non-holder is refused; released leases are claimable") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto a = db->openMigrated();
    auto b = db->open();
    REQUIRE(a->addJob(pendingJob("issue-1", JobKind::kIssue, kJobsNow)).ok());
    auto claimed = a->claimJob("machine-a", kJobsNow, 60'000, true);
    REQUIRE(claimed.ok());
    REQUIRE(claimed->has_value());

    Job forged = **claimed;
    forged.status = JobStatus::kDone;
    CHECK(b->finishJob(forged, "machine-b").value() == false);
    CHECK(b->finishJob(forged, "").error().kind == ErrorKind::kInvalid);
    auto unchanged = b->getJob("issue-1");
    REQUIRE(unchanged.ok());
    CHECK((*unchanged)->status == JobStatus::kPending);
    CHECK((*unchanged)->leaseOwner == "machine-a");

    // A retry: the holder puts it back with a later run time, which also ends its lease.
    Job retry = **claimed;
    retry.nextRunAtMs = kJobsNow + 10'000;
    retry.lastError = "try again";
    CHECK(a->finishJob(retry, "machine-a").value() == true);
    CHECK_FALSE(b->claimJob("machine-b", kJobsNow + 5000, 60'000, true).value().has_value());
    auto retried = b->claimJob("machine-b", kJobsNow + 10'000, 60'000, true);
    REQUIRE(retried.ok());
    REQUIRE(retried->has_value());
    CHECK((*retried)->attempts == 2);
    CHECK((*retried)->lastError == "try again");

    // A clean shutdown releases the lease; another machine takes the job at once.
    REQUIRE(b->releaseLeases("machine-b").ok());
    auto resumed = a->claimJob("machine-a", kJobsNow + 10'001, 60'000, true);
    REQUIRE(resumed.ok());
    REQUIRE(resumed->has_value());
    CHECK((*resumed)->leaseOwner == "machine-a");
    CHECK(a->claimJob("", kJobsNow, 1000, true).error().kind == ErrorKind::kInvalid);
  }
}

TEST_CASE("store: leasedJobs lists the attempts running on every machine, and only those") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto a = db->openMigrated();
    auto b = db->open();
    REQUIRE(a->addJob(pendingJob("1", JobKind::kIssue, kJobsNow)).ok());
    REQUIRE(a->addJob(pendingJob("2", JobKind::kRenew, kJobsNow)).ok());
    REQUIRE(a->addJob(pendingJob("3", JobKind::kServer, kJobsNow)).ok());
    REQUIRE(
        a->addJob(pendingJob("4", JobKind::kIssue, kJobsNow + 60'000)).ok());  // not due: unleased
    CHECK(b->leasedJobs(kJobsNow, 100).value().empty());

    // Renewals and server jobs are claimed first, by ID: A takes "2", B "3" and then "1".
    auto renewal = a->claimJob("machine-a", kJobsNow, 1000, true);
    auto server = b->claimJob("machine-b", kJobsNow, 5000, true);
    auto issue = b->claimJob("machine-b", kJobsNow, 5000, true);
    REQUIRE(renewal.ok());
    REQUIRE(server.ok());
    REQUIRE(issue.ok());
    REQUIRE(renewal->has_value());
    REQUIRE(server->has_value());
    REQUIRE(issue->has_value());
    CHECK((*renewal)->id == "2");
    CHECK((*server)->id == "3");
    CHECK((*issue)->id == "1");

    auto leased = a->leasedJobs(kJobsNow + 500, 100);
    REQUIRE(leased.ok());
    std::map<std::string, std::string> owners;
    for (const Job& job : *leased) owners[job.id] = job.leaseOwner;
    CHECK(owners == std::map<std::string, std::string>{
                        {"1", "machine-b"}, {"2", "machine-a"}, {"3", "machine-b"}});
    CHECK(a->leasedJobs(kJobsNow + 500, 2).value().size() == 2);

    // A's lease ran out; B finished the issue: only the server job is still running.
    Job finished = **issue;
    finished.status = JobStatus::kDone;
    REQUIRE(b->finishJob(finished, "machine-b").value());
    auto later = a->leasedJobs(kJobsNow + 1000, 100);
    REQUIRE(later.ok());
    REQUIRE(later->size() == 1);
    CHECK(later->front().id == "3");
    CHECK(jobHostname(later->front(), "example.com") == "example.com");
    CHECK(jobHostname(**renewal, "example.com") == "t2.example.com");
  }
}

}  // namespace
}  // namespace ot::controld
