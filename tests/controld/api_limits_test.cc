// The API under pressure, on SQLite and MariaDB: rate limits per client address and per tunnel
// (GCRA in the rate_limits table), the issuance backlog, storage that cannot be reached (a
// MariaDB port where nothing listens, a SQLite file that cannot be opened) and writes that lose
// a race with another writer.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "common/metrics.h"
#include "controld/server_metrics.h"
#include "tests/controld/api_test_support.h"
#include "tests/controld/forwarding_store.h"

namespace ot::controld {
namespace {

using testing::bearer;
using testing::checkError;
using testing::CreatedForTest;
using testing::headerOf;
using testing::jsonType;
using testing::parseBody;
using testing::TestApi;
using testing::testDatabases;
using testing::tunnelCsr;

// A real store with two ways to misbehave: countJobs can fail, and another writer can rewrite a
// tunnel right after this process read it (so the revisioned write that follows really loses).
class InterferingStore final : public testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;

  std::atomic<bool> failCountJobs{false};
  std::atomic<bool> writeAfterRead{false};
  std::atomic<int> countJobsCalls{0};

  Result<std::optional<StoredTunnel>> getTunnel(const std::string& id) override {
    auto read = inner_.getTunnel(id);
    if (writeAfterRead && read.ok() && read->has_value()) {
      REQUIRE(inner_.updateTunnel((*read)->record, (*read)->revision).ok());
    }
    return read;
  }
  Result<int64_t> countJobs(JobStatus status, int64_t sinceMs) override {
    ++countJobsCalls;
    if (failCountJobs) return Error{ErrorKind::kUnavailable, "storage unavailable (test)"};
    return inner_.countJobs(status, sinceMs);
  }
};

std::vector<std::string> rateKeys(const testing::TestDatabase& db) {
  auto sql = db.raw();
  std::vector<std::string> keys(100);
  *sql << "SELECT k FROM rate_limits ORDER BY k", soci::into(keys);
  return keys;
}

Job pendingJob(const std::string& id) {
  Job job;
  job.id = id;
  job.kind = JobKind::kIssue;
  job.tunnelId = "elsewhere";
  job.queuedAtMs = testing::kStartMs;
  job.nextRunAtMs = testing::kStartMs;
  return job;
}

// opentunnel_requests_limited_total{limit}.
double limitedCount(metrics::Metrics& metrics, const char* limit) {
  return metrics.counter("opentunnel_requests_limited_total", "", {{"limit", limit}}).Value();
}

TEST_CASE("api: client rate keys: IPv4 addresses, IPv6 /64s, one key per address") {
  CHECK(clientRateKey("203.0.113.7") == "203.0.113.7");
  CHECK(clientRateKey("2001:db8:1:2:3:4:5:6") == "2001:db8:1:2::/64");
  CHECK(clientRateKey("2001:0DB8:0001:0002:ffff::1") == "2001:db8:1:2::/64");
  CHECK(clientRateKey("[2001:db8::1]") == "2001:db8::/64");
  CHECK(clientRateKey("fe80::1%eth0") == "fe80::/64");
  CHECK(clientRateKey("::1") == "::/64");
  CHECK(clientRateKey("::ffff:198.51.100.4") == "198.51.100.4");
  CHECK(clientRateKey("") == "unknown");
  // Not an address (an endpoint included): one shared budget, never a key per variant.
  CHECK(clientRateKey("not an address") == "unknown");
  CHECK(clientRateKey("203.0.113.7:443") == "unknown");
  CHECK(clientRateKey("203.0.113.7:444") == "unknown");
  CHECK(clientRateKey("[2001:db8::1]:443") == "unknown");
  CHECK(clientRateKey(std::string(300, 'x')) == "unknown");
}

TEST_CASE("api: tunnels per client address are rate limited") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TunnelServiceConfig config = testing::testConfig();
    config.createRatePerHour = 30;  // one every 2 minutes
    config.createRateBurst = 2;
    TestApi api(*store, config);

    api.create("", "203.0.113.7");
    api.create("", "203.0.113.7");
    const ApiResponse refused = api.call("POST", "/api/tunnel", "", {}, "203.0.113.7");
    checkError(refused, 429, "RateLimitedError");
    CHECK(headerOf(refused, "Retry-After") == "120");
    CHECK(parseBody(refused)["message"] ==
          "This address has created too many tunnels; try again in about 2 minutes");
    // A wanted id does not get around it, and a refused request creates nothing.
    checkError(api.call("POST", "/api/tunnel", R"({"id":"sneaky"})", jsonType(), "203.0.113.7"),
               429, "RateLimitedError");
    CHECK_FALSE(store->getTunnel("sneaky")->has_value());
    checkError(api.call("POST", "/api/tunnel", "", {}, "::ffff:203.0.113.7"), 429,
               "RateLimitedError");
    api.create("", "198.51.100.1");

    // IPv6 clients share a budget per /64.
    api.create("", "2001:db8:1:2::5");
    api.create("", "2001:db8:1:2:aaaa::9");
    checkError(api.call("POST", "/api/tunnel", "", {}, "2001:0db8:0001:0002:ffff::1"), 429,
               "RateLimitedError");
    api.create("", "2001:db8:1:3::1");

    // The budget refills one tunnel per interval.
    api.clock.advance(60'000);
    const ApiResponse later = api.call("POST", "/api/tunnel", "", {}, "203.0.113.7");
    checkError(later, 429, "RateLimitedError");
    CHECK(headerOf(later, "Retry-After") == "60");
    CHECK(parseBody(later)["message"] ==
          "This address has created too many tunnels; try again in about 1 minute");
    api.clock.advance(60'000);
    api.create("", "203.0.113.7");
    checkError(api.call("POST", "/api/tunnel", "", {}, "203.0.113.7"), 429, "RateLimitedError");

    CHECK(rateKeys(*db) ==
          std::vector<std::string>{"create:198.51.100.1", "create:2001:db8:1:2::/64",
                                   "create:2001:db8:1:3::/64", "create:203.0.113.7"});
  }
}

TEST_CASE("api: new certificates per tunnel are rate limited; rebinding is free") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TunnelServiceConfig config = testing::testConfig();
    config.issuanceRatePerDay = 5;  // one every 4.8 hours
    config.issuanceRateBurst = 2;
    metrics::Metrics metrics;  // counted as ControldServer counts it
    config.onLimited = limitedCounter(metrics);
    TestApi api(*store, config);
    const CreatedForTest tunnel = api.create();
    const CreatedForTest other = api.create();

    // Every freshly signed CSR is a new one (ECDSA signatures are randomized).
    REQUIRE(api.bind(tunnel, tunnelCsr(tunnel.id)).status == 202);
    api.finishIssuance(tunnel.id);
    const std::string current = tunnelCsr(tunnel.id, true);
    REQUIRE(api.bind(tunnel, current).status == 202);
    api.finishIssuance(tunnel.id, CertificateState::kReady);
    const StoredTunnel beforeRefusal = api.stored(tunnel.id);
    const ApiResponse refused = api.bind(tunnel, tunnelCsr(tunnel.id));
    checkError(refused, 429, "RateLimitedError");
    CHECK(headerOf(refused, "Retry-After") == "17280");
    CHECK(parseBody(refused)["message"] ==
          "This tunnel has asked for too many new certificates; try again in about 5 hours");
    CHECK(limitedCount(metrics, "issuance_rate") == 1);
    CHECK(limitedCount(metrics, "create_rate") == 0);
    // The refused request's claim on the record was given back: the certificate is as before.
    CHECK(api.stored(tunnel.id).record == beforeRefusal.record);
    CHECK(api.pendingJobs() == 2);

    CHECK(api.bind(tunnel, current).status == 200);
    CHECK(api.bind(other, tunnelCsr(other.id)).status == 202);
    api.clock.advance(17'280'000);
    CHECK(api.bind(tunnel, tunnelCsr(tunnel.id)).status == 202);
    std::vector<std::string> expected = {"create:203.0.113.7", "issue:" + other.id,
                                         "issue:" + tunnel.id};
    std::sort(expected.begin(), expected.end());
    CHECK(rateKeys(*db) == expected);
  }
}

TEST_CASE("api: a rate of 0 disables its limit") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TunnelServiceConfig config = testing::testConfig();
    config.createRatePerHour = 0;
    config.issuanceRatePerDay = 0;
    TestApi api(*store, config);
    CreatedForTest tunnel;
    for (int i = 0; i < 15; ++i) tunnel = api.create();
    for (int i = 0; i < 8; ++i) {
      CHECK(api.bind(tunnel, tunnelCsr(tunnel.id)).status == 202);
      api.finishIssuance(tunnel.id);
    }
    CHECK(rateKeys(*db).empty());
  }
}

TEST_CASE("api: while the issuance backlog is over its limit, creates and new CSRs answer 503") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto real = db->openMigrated();
    InterferingStore store(*real);
    TunnelServiceConfig config = testing::testConfig();
    config.issuanceBacklogLimit = 2;
    metrics::Metrics metrics;
    config.onLimited = limitedCounter(metrics);
    TestApi api(store, config, real.get());

    const CreatedForTest tunnel = api.create();  // reads the count: 0
    const std::string csr = tunnelCsr(tunnel.id);
    REQUIRE(api.bind(tunnel, csr).status == 202);
    REQUIRE(real->addJob(pendingJob("backlog-1")).ok());
    REQUIRE(real->addJob(pendingJob("backlog-2")).ok());
    CHECK(api.pendingJobs() == 3);

    // The count is cached for 5 s.
    api.clock.advance(4999);
    api.create();
    CHECK(store.countJobsCalls == 1);
    api.finishIssuance(tunnel.id);  // so that another CSR may be bound
    api.clock.advance(1);
    const ApiResponse busy = api.call("POST", "/api/tunnel");
    checkError(busy, 503, "ServiceUnavailableError");
    CHECK(headerOf(busy, "Retry-After") == "30");
    CHECK(store.countJobsCalls == 2);
    const ApiResponse busyBind = api.bind(tunnel, tunnelCsr(tunnel.id, true));
    checkError(busyBind, 503, "ServiceUnavailableError");
    CHECK(headerOf(busyBind, "Retry-After") == "30");
    CHECK(limitedCount(metrics, "issuance_backlog") == 2);
    CHECK(store.countJobsCalls == 2);
    // Rebinding the current CSR, and reading, still work.
    CHECK(api.bind(tunnel, csr).status == 200);
    CHECK(api.call("GET", "/api/tunnel/" + tunnel.id, "", bearer(tunnel.token)).status == 200);
    // Exactly at the limit is not over it.
    auto claimed = real->claimJob("test-runner", testing::kStartMs + 10'000, 60'000, true);
    REQUIRE(claimed.ok());
    REQUIRE(claimed->has_value());
    Job done = **claimed;
    done.status = JobStatus::kDone;
    REQUIRE(real->finishJob(done, "test-runner").ok());
    CHECK(api.pendingJobs() == 2);
    api.clock.advance(5000);
    api.create();

    // If the count cannot be read, nothing is refused.
    REQUIRE(real->addJob(pendingJob("backlog-3")).ok());
    REQUIRE(real->addJob(pendingJob("backlog-4")).ok());
    store.failCountJobs = true;
    api.clock.advance(5000);
    api.create();
    CHECK(api.bind(tunnel, tunnelCsr(tunnel.id, true)).status == 202);
    store.failCountJobs = false;
    api.clock.advance(5000);
    checkError(api.call("POST", "/api/tunnel"), 503, "ServiceUnavailableError");

    // A limit of 0 never refuses.
    config.issuanceBacklogLimit = 0;
    TestApi unlimited(store, config);
    unlimited.create();
  }
}

// A TCP port on 127.0.0.1 where nothing listens (bound once, then released).
uint16_t deadPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  socklen_t length = sizeof address;
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  close(fd);
  return ntohs(address.sin_port);
}

TEST_CASE("api: with storage down, every route that needs it answers 503") {
  struct Down {
    std::string name;
    std::string url;
  };
  const std::vector<Down> outages = {
      {"mariadb, nothing listening",
       "mysql://ot:secret@127.0.0.1:" + std::to_string(deadPort()) + "/opentunnel"},
      {"sqlite, unopenable file", "sqlite:/nonexistent-" + testing::randomHex(8) + "/store.db"},
  };
  for (const Down& down : outages) {
    CAPTURE(down.name);
    StoreOptions options;
    options.url = down.url;
    options.poolSize = 2;
    options.acquireTimeoutMs = 1000;
    options.connectTimeoutMs = 1000;
    options.statementTimeoutMs = 1000;
    auto opened = SqlStore::open(options);
    REQUIRE(opened.ok());
    auto store = std::move(opened).value();
    for (const bool limited : {true, false}) {
      CAPTURE(limited);
      TunnelServiceConfig config = testing::testConfig();
      if (!limited) {
        config.createRatePerHour = 0;
        config.issuanceRatePerDay = 0;
        config.issuanceBacklogLimit = 0;
      }
      TestApi api(*store, config);
      const std::string unavailable =
          R"({"_tag":"ServiceUnavailableError","message":"storage unavailable"})";
      const auto token = bearer("some-token");
      const std::string csrBody = nlohmann::json{{"csr", tunnelCsr("abc")}}.dump();
      for (const ApiResponse& response :
           {api.call("POST", "/api/tunnel"),
            api.call("POST", "/api/tunnel", R"({"id":"abc"})", jsonType()),
            api.call("GET", "/api/tunnel/abc", "", token),
            api.call("DELETE", "/api/tunnel/abc", "", token),
            api.call("GET", "/api/tunnel/abc/certificate", "", token),
            api.call("PUT", "/api/tunnel/abc/certificate", csrBody, jsonType(token)),
            api.call("GET", "/health")}) {
        CHECK(response.status == 503);
        CHECK(response.body == unavailable);
      }
      // What needs no storage still answers.
      checkError(api.call("GET", "/api/tunnel/abc"), 401, "UnauthorizedError");
      checkError(api.call("POST", "/api/tunnel", "[", jsonType()), 400, "BadRequestError");
      CHECK(api.call("GET", "/openapi.json").status == 200);
      CHECK(api.publisher.records().empty());
      CHECK(api.notifier.count() == 0);
    }
  }
}

TEST_CASE("api: a write that loses to another writer answers 503; the retry reloads") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto real = db->openMigrated();
    InterferingStore store(*real);
    TestApi api(store, testing::testConfig(), real.get());
    const CreatedForTest tunnel = api.create();
    const size_t published = api.publisher.records().size();
    const std::string stale =
        R"({"_tag":"ServiceUnavailableError","message":"the tunnel changed; retry"})";

    store.writeAfterRead = true;
    const ApiResponse lost = api.bind(tunnel, tunnelCsr(tunnel.id));
    CHECK(lost.status == 503);
    CHECK(lost.body == stale);
    // A bind that loses reads the record again, three rounds in all: here every read is
    // followed by the other writer's write, so each round loses (revision 1 + 3 of theirs).
    CHECK(api.stored(tunnel.id).revision == 4);  // the other writer's
    CHECK(api.stored(tunnel.id).record.certificate.state == CertificateState::kNone);
    CHECK(api.pendingJobs() == 0);
    CHECK(api.notifier.count() == 0);
    CHECK(api.publisher.records().size() == published);

    const ApiResponse lostDelete =
        api.call("DELETE", "/api/tunnel/" + tunnel.id, "", bearer(tunnel.token));
    CHECK(lostDelete.status == 503);
    CHECK(lostDelete.body == stale);
    CHECK_FALSE(api.stored(tunnel.id).record.deleted());
    CHECK(api.publisher.deleted().empty());

    store.writeAfterRead = false;
    CHECK(api.bind(tunnel, tunnelCsr(tunnel.id)).status == 202);
    CHECK(api.stored(tunnel.id).revision == 6);  // one more of theirs (the delete), then ours
    CHECK(api.pendingJobs() == 1);
    CHECK(api.call("DELETE", "/api/tunnel/" + tunnel.id, "", bearer(tunnel.token)).status == 200);
    CHECK(api.publisher.deleted() == std::vector<std::string>{tunnel.id});
  }
}

}  // namespace
}  // namespace ot::controld
