// The Admin gRPC service (docs/admin.md) in process, over its real server on a unix socket, on
// SQLite and MariaDB: keyset paging over more than one page, the list's filters, show and not
// found, delete (relays told), jobs retry, expiring certificates, the stats' JSON being the HTTP
// route's, export/import through a fake Backup (and UNIMPLEMENTED without one), reflection, and the
// TCP listener's TLS and bearer token.
#include "controld/admin/admin_service.h"

#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "controld/admin/admin_server.h"
#include "controld/admin/admin_stats_source.h"
#include "tests/controld/control_harness.h"
#include "tests/controld/recording_publisher.h"
#include "tests/controld/test_database.h"
#include "tests/unit_grpc/reflection_client.h"

namespace ot::controld {
namespace {

using testing::TempDir;
using testing::TestDatabase;
using testing::testDatabases;

constexpr int64_t kNow = 1'800'000'000'000;
constexpr int64_t kDay = 24LL * 3600 * 1000;
const std::string kToken = "the-operators-admin-token";

TunnelRecord record(const std::string& id) {
  TunnelRecord r;
  r.id = id;
  r.hostname = id + ".example.test";
  r.tokenSha256Hex = std::string(64, 'a');
  r.createdAtMs = kNow - kDay;
  return r;
}

// A Backup whose export writes three records in two pieces and whose import counts what it is fed.
class FakeBackup final : public Backup {
 public:
  Status exportTo(const ExportOptions& options, const ExportSink& sink) override {
    excludedDeleted = options.excludeDeleted;
    if (!sink("{\"a\":1}\n{\"b\":2}\n", 2)) return Error{ErrorKind::kUnavailable, "gone"};
    if (!sink("{\"c\":3}\n", 1)) return Error{ErrorKind::kUnavailable, "gone"};
    return Ok{};
  }
  std::unique_ptr<ImportSession> beginImport(const ImportOptions& options) override {
    dryRun = options.dryRun;
    return std::make_unique<Session>(*this);
  }
  bool excludedDeleted = false;
  bool dryRun = false;
  std::string fed;

 private:
  class Session final : public ImportSession {
   public:
    explicit Session(FakeBackup& owner) : owner_(owner) {}
    Status feed(std::string_view bytes) override {
      owner_.fed.append(bytes);
      if (owner_.fed.find("broken") != std::string::npos) {
        return Error{ErrorKind::kInvalid, "line 1: not a record"};
      }
      return Ok{};
    }
    Result<ImportReport> finish() override {
      ImportReport report;
      report.inserted = 2;
      report.rejected.push_back({"bad_id", "not a DNS label"});
      return report;
    }
    [[nodiscard]] uint64_t recordsSeen() const override { return 3; }

   private:
    FakeBackup& owner_;
  };
};

struct AdminHarness {
  explicit AdminHarness(const TestDatabase& database, Backup* backup = nullptr,
                        AdminServerOptions serverOptions = {})
      : store(database.openMigrated(&metrics)),
        hub(registry),
        stats(*store, registry, hub, "machine-a", "fra", std::chrono::steady_clock::now(),
              [] { return static_cast<mesh::MeshNode*>(nullptr); }) {
    AdminServiceContext context;
    context.store = store.get();
    context.pages = store.get();
    context.registry = &registry;
    context.hub = &hub;
    context.publisher = &publisher;
    context.backup = backup;
    context.gatherStats = [this] { return stats.gather(); };
    context.machineId = "machine-a";
    context.nowMs = [] { return kNow; };
    service = std::make_unique<AdminService>(std::move(context));
    serverOptions.socketPath = (dir.path() / "admin.sock").string();
    server = std::make_unique<AdminServer>(serverOptions, *service);
    const Status started = server->start();
    REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().message));
    channel =
        grpc::CreateChannel("unix:" + serverOptions.socketPath, grpc::InsecureChannelCredentials());
    stub = av1::Admin::NewStub(channel);
  }

  static std::unique_ptr<grpc::ClientContext> call() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return context;
  }

  // Every tunnel ListTunnels gives for `request`, following the page tokens; `pages` counts calls.
  std::vector<av1::TunnelSummary> listAll(av1::ListTunnelsRequest request, int* pages = nullptr) {
    std::vector<av1::TunnelSummary> all;
    for (int calls = 1; calls < 100; ++calls) {
      av1::ListTunnelsResponse page;
      const grpc::Status status = stub->ListTunnels(call().get(), request, &page);
      REQUIRE_MESSAGE(status.ok(), status.error_message());
      for (const auto& tunnel : page.tunnels()) all.push_back(tunnel);
      if (pages != nullptr) *pages = calls;
      if (page.next_page_token().empty()) return all;
      request.set_page_token(page.next_page_token());
    }
    FAIL("the pages never ended");
    return all;
  }

  TempDir dir;
  metrics::Metrics metrics;  // as in controld: every store call measured under its name
  std::unique_ptr<SqlStore> store;
  BridgeRegistry registry;
  RelayHub hub;
  test_support::RecordingPublisher publisher;
  AdminStatsSource stats;
  std::unique_ptr<AdminService> service;
  std::unique_ptr<AdminServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<av1::Admin::Stub> stub;
};

std::vector<std::string> idsOf(const std::vector<av1::TunnelSummary>& tunnels) {
  std::vector<std::string> ids;
  for (const auto& tunnel : tunnels) ids.push_back(tunnel.tunnel_id());
  return ids;
}

TEST_CASE("admin: tunnels list pages by ID over more than one page, with filters") {
  for (const auto& database : testDatabases()) {
    CAPTURE(database->name());
    AdminHarness h(*database);
    // 230 tunnels: every 10th deleted, every 7th issuing, "b" ones a ready certificate.
    std::set<std::string> live;
    for (int i = 0; i < 230; ++i) {
      const std::string id = std::string(i % 2 == 0 ? "a" : "b") + std::to_string(1000 + i);
      TunnelRecord r = record(id);
      if (i % 10 == 0) r.deletedAtMs = kNow - 1000;
      if (i % 7 == 0) r.certificate.state = CertificateState::kIssuing;
      if (i % 2 == 1 && i % 7 != 0) {
        r.certificate.state = CertificateState::kReady;
        r.certificate.notAfterMs = kNow + (i < 50 ? 3 : 60) * kDay;
      }
      REQUIRE(h.store->insertTunnel(r).ok());
      if (!r.deleted()) live.insert(id);
    }

    av1::ListTunnelsRequest request;
    request.set_page_size(100);
    int pages = 0;
    const auto all = h.listAll(request, &pages);
    CHECK(pages == 3);
    const auto ids = idsOf(all);
    CHECK(std::set<std::string>(ids.begin(), ids.end()) == live);
    CHECK(std::is_sorted(ids.begin(), ids.end()));
    CHECK(ids.size() == live.size());  // no tunnel twice across the pages

    av1::ListTunnelsRequest withDeleted = request;
    withDeleted.set_include_deleted(true);
    CHECK(h.listAll(withDeleted).size() == 230);
    av1::ListTunnelsRequest onlyDeleted = request;
    onlyDeleted.set_only_deleted(true);
    const auto deleted = h.listAll(onlyDeleted);
    CHECK(deleted.size() == 23);
    for (const auto& tunnel : deleted) CHECK(tunnel.deleted());

    av1::ListTunnelsRequest issuing = request;
    issuing.set_only_issuing(true);
    for (const auto& tunnel : h.listAll(issuing)) {
      CHECK(tunnel.certificate_state() == opentunnel::control::v1::CERTIFICATE_STATE_ISSUING);
    }
    av1::ListTunnelsRequest ready = request;
    ready.set_page_size(10);
    ready.set_certificate_state(opentunnel::control::v1::CERTIFICATE_STATE_READY);
    const auto readyOnes = h.listAll(ready);
    CHECK_FALSE(readyOnes.empty());
    for (const auto& tunnel : readyOnes) {
      CHECK(tunnel.tunnel_id()[0] == 'b');
      CHECK(tunnel.certificate_not_after_unix_ms() > kNow);
    }

    av1::ListTunnelsRequest prefix = request;
    prefix.set_id_prefix("a11");
    for (const auto& id : idsOf(h.listAll(prefix))) CHECK(id.rfind("a11", 0) == 0);
    CHECK(h.listAll(prefix).size() == 40);  // a1100..a1198 even, minus the deleted every 10th

    // Online: a live bridge on this machine's relayd.
    BridgeEntry bridge;
    bridge.bridgeId = "1";
    bridge.tunnelId = "b1003";
    bridge.routes = {""};
    h.registry.replaceRelay("machine-a/1", {bridge});
    av1::ListTunnelsRequest online = request;
    online.set_only_online(true);
    const auto onlineOnes = h.listAll(online);
    REQUIRE(onlineOnes.size() == 1);
    CHECK(onlineOnes[0].tunnel_id() == "b1003");
    CHECK(onlineOnes[0].bridges() == 1);

    av1::ListTunnelsRequest bad = request;
    bad.set_page_token("NOT AN ID");
    av1::ListTunnelsResponse ignored;
    CHECK(h.stub->ListTunnels(AdminHarness::call().get(), bad, &ignored).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
  }
}

TEST_CASE("admin: show answers NOT_FOUND for an unknown tunnel; delete tells the relays") {
  for (const auto& database : testDatabases()) {
    CAPTURE(database->name());
    AdminHarness h(*database);
    REQUIRE(h.store->insertTunnel(record("shown")).ok());
    BridgeEntry bridge;
    bridge.bridgeId = "9";
    bridge.tunnelId = "shown";
    bridge.routes = {""};
    bridge.peerAddress = "192.0.2.1:5555";
    h.registry.replaceRelay("machine-a/1", {bridge});

    av1::GetTunnelRequest get;
    get.set_tunnel_id("shown");
    av1::GetTunnelResponse shown;
    REQUIRE(h.stub->GetTunnel(AdminHarness::call().get(), get, &shown).ok());
    CHECK(shown.summary().hostname() == "shown.example.test");
    CHECK(shown.summary().bridges() == 1);
    REQUIRE(shown.bridges_size() == 1);
    CHECK(shown.bridges(0).machine_id() == "machine-a");
    CHECK(shown.bridges(0).bridge().peer_address() == "192.0.2.1:5555");
    CHECK(nlohmann::json::parse(shown.record_json())["id"] == "shown");

    get.set_tunnel_id("nosuchtunnel");
    CHECK(h.stub->GetTunnel(AdminHarness::call().get(), get, &shown).error_code() ==
          grpc::StatusCode::NOT_FOUND);

    av1::DeleteTunnelRequest remove;
    remove.set_tunnel_id("nosuchtunnel");
    av1::DeleteTunnelResponse removed;
    CHECK(h.stub->DeleteTunnel(AdminHarness::call().get(), remove, &removed).error_code() ==
          grpc::StatusCode::NOT_FOUND);
    remove.set_tunnel_id("shown");
    REQUIRE(h.stub->DeleteTunnel(AdminHarness::call().get(), remove, &removed).ok());
    CHECK_FALSE(removed.already_deleted());
    CHECK(h.publisher.deleted() == std::vector<std::string>{"shown"});
    auto stored = h.store->getTunnel("shown");
    REQUIRE(stored.ok());
    REQUIRE(stored->has_value());
    CHECK((*stored)->record.deleted());
    REQUIRE(h.stub->DeleteTunnel(AdminHarness::call().get(), remove, &removed).ok());
    CHECK(removed.already_deleted());
    CHECK(h.publisher.deleted().size() == 1);

    av1::ResetTunnelRequest reset;
    reset.set_tunnel_id("nosuchtunnel");
    av1::ResetTunnelResponse resetDone;
    CHECK(h.stub->ResetTunnel(AdminHarness::call().get(), reset, &resetDone).error_code() ==
          grpc::StatusCode::NOT_FOUND);
  }
}

TEST_CASE("admin: jobs list by status; retry puts a failed job back to pending") {
  for (const auto& database : testDatabases()) {
    CAPTURE(database->name());
    AdminHarness h(*database);
    for (int i = 0; i < 130; ++i) {
      Job job = pendingJob(JobKind::kIssue, "job-" + std::to_string(1000 + i), "t", kNow - 10);
      if (i % 3 == 0) {
        job.status = JobStatus::kFailed;
        job.lastError = "the CA said no";
      }
      REQUIRE(h.store->addJob(job).ok());
    }
    av1::ListJobsRequest request;
    request.set_page_size(50);
    request.set_status("failed");
    size_t failed = 0;
    int pages = 0;
    while (true) {
      av1::ListJobsResponse page;
      REQUIRE(h.stub->ListJobs(AdminHarness::call().get(), request, &page).ok());
      ++pages;
      for (const auto& job : page.jobs()) {
        CHECK(job.status() == "failed");
        ++failed;
      }
      if (page.next_page_token().empty()) break;
      request.set_page_token(page.next_page_token());
    }
    CHECK(failed == 44);
    CHECK(pages == 1);
    request.set_status("");
    request.set_page_token("");
    av1::ListJobsResponse first;
    REQUIRE(h.stub->ListJobs(AdminHarness::call().get(), request, &first).ok());
    CHECK(first.jobs_size() == 50);
    CHECK(first.next_page_token() == "job-1049");
    request.set_status("bogus");
    CHECK(h.stub->ListJobs(AdminHarness::call().get(), request, &first).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);

    av1::RetryJobRequest retry;
    av1::RetryJobResponse retried;
    retry.set_job_id("job-1000");
    REQUIRE(h.stub->RetryJob(AdminHarness::call().get(), retry, &retried).ok());
    auto job = h.store->getJob("job-1000");
    REQUIRE(job.ok());
    REQUIRE(job->has_value());
    CHECK((*job)->status == JobStatus::kPending);
    CHECK((*job)->nextRunAtMs == kNow);
    // Pending now: a second retry is refused, as is an unknown job.
    CHECK(h.stub->RetryJob(AdminHarness::call().get(), retry, &retried).error_code() ==
          grpc::StatusCode::FAILED_PRECONDITION);
    retry.set_job_id("job-none");
    CHECK(h.stub->RetryJob(AdminHarness::call().get(), retry, &retried).error_code() ==
          grpc::StatusCode::NOT_FOUND);
  }
}

TEST_CASE("admin: certs lists the certificates expiring within the window") {
  for (const auto& database : testDatabases()) {
    CAPTURE(database->name());
    AdminHarness h(*database);
    for (int i = 0; i < 600; ++i) {
      TunnelRecord r = record("c" + std::to_string(1000 + i));
      if (i % 100 == 0) {
        r.certificate.state = CertificateState::kReady;
        r.certificate.notAfterMs = kNow + (i < 300 ? 5 : 40) * kDay;
      }
      REQUIRE(h.store->insertTunnel(r).ok());
    }
    std::vector<std::string> found;
    av1::ExpiringCertificatesRequest request;
    while (true) {
      av1::ExpiringCertificatesResponse page;
      REQUIRE(h.stub->ExpiringCertificates(AdminHarness::call().get(), request, &page).ok());
      for (const auto& tunnel : page.tunnels()) found.push_back(tunnel.tunnel_id());
      if (page.next_page_token().empty()) break;
      request.set_page_token(page.next_page_token());
    }
    CHECK(found == std::vector<std::string>{"c1000", "c1100", "c1200"});  // 14 days by default
    request.set_page_token("");
    request.set_within_ms(60 * kDay);
    av1::ExpiringCertificatesResponse wide;
    found.clear();
    while (true) {
      REQUIRE(h.stub->ExpiringCertificates(AdminHarness::call().get(), request, &wide).ok());
      for (const auto& tunnel : wide.tunnels()) found.push_back(tunnel.tunnel_id());
      if (wide.next_page_token().empty()) break;
      request.set_page_token(wide.next_page_token());
    }
    CHECK(found.size() == 6);
  }
}

TEST_CASE("admin: stats answer the HTTP route's JSON; mesh view and drain alone; reflection") {
  auto databases = testDatabases();
  AdminHarness h(*databases.front());
  REQUIRE(h.store->insertTunnel(record("one")).ok());
  av1::StatsResponse stats;
  REQUIRE(h.stub->Stats(AdminHarness::call().get(), {}, &stats).ok());
  CHECK(stats.tunnels() == 1);
  CHECK(stats.machine().machine_id() == "machine-a");
  CHECK_FALSE(stats.machine().relay_connected());
  const auto statsJson = nlohmann::json::parse(stats.json());
  CHECK(statsJson["tunnels"] == 1);
  CHECK(statsJson["machine"]["id"] == "machine-a");
  CHECK(statsJson.contains("cluster"));

  av1::MeshViewResponse mesh;
  REQUIRE(h.stub->MeshView(AdminHarness::call().get(), {}, &mesh).ok());
  CHECK(mesh.complete());
  REQUIRE(mesh.machines_size() == 1);
  CHECK(mesh.machines(0).self());

  // No relayd connected: the drain reaches none (otctl says so and exits 1).
  av1::DrainRelayResponse drained;
  REQUIRE(h.stub->DrainRelay(AdminHarness::call().get(), {}, &drained).ok());
  CHECK(drained.relays() == 0);

  ot::testing::ReflectionClient reflection(h.channel);
  auto services = reflection.listServices();
  CHECK(std::find(services.begin(), services.end(), "opentunnel.admin.v1.Admin") != services.end());
}

TEST_CASE("admin: export and import go through the Backup; without one they are UNIMPLEMENTED") {
  auto databases = testDatabases();
  {
    AdminHarness h(*databases.front());
    grpc::ClientContext context;
    auto reader = h.stub->Export(&context, {});
    av1::ExportChunk chunk;
    while (reader->Read(&chunk)) {
    }
    const grpc::Status status = reader->Finish();
    CHECK(status.error_code() == grpc::StatusCode::UNIMPLEMENTED);
    CHECK(status.error_message() == "export/import not built");
  }
  FakeBackup backup;
  AdminHarness h(*databases.front(), &backup);
  grpc::ClientContext exportContext;
  av1::ExportRequest exportRequest;
  exportRequest.set_exclude_deleted(true);
  auto reader = h.stub->Export(&exportContext, exportRequest);
  av1::ExportChunk chunk;
  std::string file;
  uint32_t records = 0;
  while (reader->Read(&chunk)) {
    file += chunk.data();
    records += chunk.records();
  }
  REQUIRE(reader->Finish().ok());
  CHECK(file == "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
  CHECK(records == 3);
  CHECK(backup.excludedDeleted);

  grpc::ClientContext importContext;
  av1::ImportResponse response;
  auto writer = h.stub->Import(&importContext, &response);
  av1::ImportChunk piece;
  piece.set_dry_run(true);
  piece.set_data("{\"a\":");
  REQUIRE(writer->Write(piece));
  piece.Clear();
  piece.set_data("1}\n");
  REQUIRE(writer->Write(piece));
  writer->WritesDone();
  REQUIRE(writer->Finish().ok());
  CHECK(backup.dryRun);
  CHECK(backup.fed == "{\"a\":1}\n");
  CHECK(response.inserted() == 2);
  REQUIRE(response.rejected_size() == 1);
  CHECK(response.rejected(0).tunnel_id() == "bad_id");

  // A feed error ends the import with the error's status.
  grpc::ClientContext brokenContext;
  auto broken = h.stub->Import(&brokenContext, &response);
  piece.Clear();
  piece.set_data("broken");
  (void)broken->Write(piece);
  broken->WritesDone();
  CHECK(broken->Finish().error_code() == grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_CASE("admin: TCP needs TLS and a token; calls without the token are refused") {
  AdminServerOptions options;
  options.socketPath = "/tmp/unused.sock";
  options.tcp = *config::parseListenAddress("127.0.0.1:0");
  CHECK(checkAdminServerOptions(options).error().kind == ErrorKind::kInvalid);  // no TLS
  TempDir dir;
  const auto certificate = testing::selfSignedCertificate("localhost");
  options.tlsCertFile = (dir.path() / "cert.pem").string();
  options.tlsKeyFile = (dir.path() / "key.pem").string();
  { std::ofstream(options.tlsCertFile) << certificate.pem.chainPem; }
  { std::ofstream(options.tlsKeyFile) << certificate.pem.keyPem; }
  CHECK_FALSE(checkAdminServerOptions(options).ok());  // TLS, but no token
  options.token = kToken;
  CHECK(checkAdminServerOptions(options).ok());

  auto databases = testDatabases();
  AdminHarness h(*databases.front(), nullptr, options);
  REQUIRE(h.server->tcpPort() > 0);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = certificate.pem.chainPem;
  grpc::ChannelArguments arguments;
  arguments.SetSslTargetNameOverride("localhost");
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(h.server->tcpPort()),
                                           grpc::SslCredentials(ssl), arguments);
  auto stub = av1::Admin::NewStub(channel);
  for (const std::string& header : {std::string(), std::string("Bearer wrong-token"),
                                    std::string("Basic ") + kToken, "Bearer " + kToken}) {
    CAPTURE(header);
    auto context = AdminHarness::call();
    if (!header.empty()) context->AddMetadata("authorization", header);
    av1::StatsResponse stats;
    const grpc::Status status = stub->Stats(context.get(), {}, &stats);
    if (header == "Bearer " + kToken) {
      CHECK(status.ok());
    } else {
      CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    }
  }
  // A plain-text client is not served on the TLS port.
  auto plain = av1::Admin::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(h.server->tcpPort()), grpc::InsecureChannelCredentials()));
  auto context = AdminHarness::call();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  context->AddMetadata("authorization", "Bearer " + kToken);
  av1::StatsResponse stats;
  CHECK_FALSE(plain->Stats(context.get(), {}, &stats).ok());
}

TEST_CASE("admin: tunnel usage answers the API's windows in total and per origin") {
  for (const auto& database : testDatabases()) {
    CAPTURE(database->name());
    AdminHarness h(*database);
    REQUIRE(h.store->insertTunnel(record("used")).ok());
    constexpr int64_t kHour = 3'600'000;
    const int64_t hour = kNow - kNow % kHour;
    REQUIRE(h.store->addUsage("used", hour, 300, 3000, 3).ok());
    REQUIRE(h.store->addOriginUsage("used", hour, "east", 200, 2000, 2).ok());
    REQUIRE(h.store->addUsage("used", hour - 2 * kDay, 50, 50, 1).ok());
    REQUIRE(h.store->addOriginUsage("used", hour - 2 * kDay, "west", 50, 50, 1).ok());

    av1::TunnelUsageRequest request;
    request.set_tunnel_id("used");
    av1::TunnelUsageResponse day;
    REQUIRE(h.stub->TunnelUsage(h.call().get(), request, &day).ok());
    CHECK(day.range() == "24h");
    CHECK(day.bucket_seconds() == 3600);
    CHECK(day.to_unix_ms() == hour + kHour);
    REQUIRE(day.total().buckets_size() == 24);
    CHECK(day.total().buckets(23).start_unix_ms() == hour);
    CHECK(day.total().bytes_in() == 300);
    CHECK(day.total().origin().empty());
    REQUIRE(day.origins_size() == 1);
    CHECK(day.origins(0).origin() == "east");
    CHECK(day.origins(0).bytes_out() == 2000);
    CHECK(day.origins(0).buckets(23).connections() == 2);

    request.set_range("30d");
    av1::TunnelUsageResponse month;
    REQUIRE(h.stub->TunnelUsage(h.call().get(), request, &month).ok());
    CHECK(month.bucket_seconds() == 86400);
    CHECK(month.total().buckets_size() == 30);
    CHECK(month.total().bytes_in() == 350);
    REQUIRE(month.origins_size() == 2);
    CHECK(month.origins(1).origin() == "west");
    CHECK(month.origins(1).connections() == 1);

    av1::TunnelUsageResponse ignored;
    request.set_range("1y");
    CHECK(h.stub->TunnelUsage(h.call().get(), request, &ignored).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
    request.set_range("");
    request.set_tunnel_id("nosuch");
    CHECK(h.stub->TunnelUsage(h.call().get(), request, &ignored).error_code() ==
          grpc::StatusCode::NOT_FOUND);
  }
}

}  // namespace
}  // namespace ot::controld
