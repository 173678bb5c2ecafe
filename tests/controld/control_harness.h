// The control service as controld runs it, for tests: a real gRPC server on a unix socket in a
// temporary directory, a real SQLite store (openStore + migrate), a real BridgeRegistry and
// RelayHub; relays are played by clients on the generated stubs. Uses doctest assertions: build
// it from a test case only.
#pragma once

#include <doctest/doctest.h>
#include <grpcpp/grpcpp.h>
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/crypto.h"
#include "controld/base/openssl_util.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/control_service.h"
#include "controld/relays/grpc_server.h"
#include "controld/relays/record_publisher.h"
#include "controld/relays/relay_hub.h"
#include "controld/store/store.h"
#include "controld/store/tunnel_record.h"
#include "opentunnel/control/v1/control.grpc.pb.h"
#include "tests/controld/forwarding_store.h"

namespace ot::controld::testing {

inline constexpr int64_t kNowMs = 1'700'000'000'000;
inline constexpr int64_t kDayMs = 24LL * 3600 * 1000;

// A deadline for every call, so a broken server fails the test instead of hanging it.
inline std::chrono::system_clock::time_point soon(int seconds = 20) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

// Polls `done` until it holds or 10 s passed: the server applies what a client wrote on its own
// thread, after the client's Write returned.
inline bool eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

inline std::string sha256Hex(std::string_view text) {
  return crypto::toHex(crypto::sha256(text));
}
inline std::string sha256Bytes(std::string_view text) {
  const auto digest = crypto::sha256(text);
  return {digest.begin(), digest.end()};
}

// A tunnel whose token is "token-<id>" and whose certificate is valid for 30 more days.
inline TunnelRecord readyTunnel(const std::string& id) {
  TunnelRecord record;
  record.id = id;
  record.hostname = id + ".tunnels.test";
  record.tokenSha256Hex = sha256Hex("token-" + id);
  record.createdAtMs = kNowMs - kDayMs;
  record.certificate.id = "cert-" + id;
  record.certificate.state = CertificateState::kReady;
  record.certificate.chainPem = "-----BEGIN CERTIFICATE-----\n(test)\n-----END CERTIFICATE-----\n";
  record.certificate.notAfterMs = kNowMs + 30 * kDayMs;
  return record;
}

inline cv1::Bridge makeBridge(const std::string& bridgeId, const std::string& tunnelId,
                              std::vector<std::string> routes = {""}) {
  cv1::Bridge bridge;
  bridge.set_bridge_id(bridgeId);
  bridge.set_tunnel_id(tunnelId);
  for (auto& route : routes) bridge.add_routes(std::move(route));
  bridge.set_origin("laptop");
  bridge.set_profile("wss-443");
  bridge.set_max_conns(64);
  bridge.set_attached_at_unix_ms(kNowMs - 1000);
  bridge.set_peer_address("192.0.2.7:40000");
  return bridge;
}

// A store that forwards to a real one, except that reads and writes of tunnels and usage fail
// with kUnavailable while `down` is set, as when the database is unreachable.
class FlakyStore final : public ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  std::atomic<bool> down{false};

  Status ping() override {
    if (down) return unreachable();
    return inner_.ping();
  }
  Result<int64_t> insertTunnel(const TunnelRecord& record) override {
    if (down) return unreachable();
    return inner_.insertTunnel(record);
  }
  Result<std::optional<StoredTunnel>> getTunnel(const std::string& id) override {
    if (down) return unreachable();
    return inner_.getTunnel(id);
  }
  Result<int64_t> updateTunnel(const TunnelRecord& record, int64_t expected) override {
    if (down) return unreachable();
    return inner_.updateTunnel(record, expected);
  }
  Result<std::vector<Job>> leasedJobs(int64_t nowMs, int limit) override {
    if (down) return unreachable();
    return inner_.leasedJobs(nowMs, limit);
  }
  Status addUsage(const std::string& tunnelId, int64_t hourStartMs, int64_t bytesIn,
                  int64_t bytesOut, int64_t connections) override {
    if (down) return unreachable();
    return inner_.addUsage(tunnelId, hourStartMs, bytesIn, bytesOut, connections);
  }

 private:
  static Error unreachable() {
    return Error{ErrorKind::kUnavailable, "database unreachable (test)"};
  }
};

// A self-signed certificate for the API domain, and its fingerprint computed by OpenSSL itself.
struct TestCertificate {
  ApiCertificatePem pem;
  std::string fingerprint;
};

inline TestCertificate selfSignedCertificate(const std::string& commonName) {
  auto key = generateEcKey("P-256");
  REQUIRE(key.ok());
  X509Ptr cert(X509_new());
  REQUIRE(cert != nullptr);
  REQUIRE(X509_set_version(cert.get(), 2) == 1);
  REQUIRE(ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), 7) == 1);
  REQUIRE(X509_gmtime_adj(X509_getm_notBefore(cert.get()), 0) != nullptr);
  REQUIRE(X509_gmtime_adj(X509_getm_notAfter(cert.get()), 3600) != nullptr);
  X509_NAME* name = X509_get_subject_name(cert.get());
  REQUIRE(X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                     reinterpret_cast<const unsigned char*>(commonName.c_str()), -1,
                                     -1, 0) == 1);
  REQUIRE(X509_set_issuer_name(cert.get(), name) == 1);
  REQUIRE(X509_set_pubkey(cert.get(), key->get()) == 1);
  REQUIRE(X509_sign(cert.get(), key->get(), EVP_sha256()) > 0);

  TestCertificate out;
  auto chain = certificatePem(cert.get());
  auto keyPem = privateKeyPem(key->get());
  REQUIRE(chain.ok());
  REQUIRE(keyPem.ok());
  out.pem.chainPem = *chain;
  out.pem.keyPem = *keyPem;
  out.pem.notAfterMs = kNowMs + 3'600'000;
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  REQUIRE(X509_digest(cert.get(), EVP_sha256(), digest, &size) == 1);
  out.fingerprint = crypto::toHex(std::span<const uint8_t>(digest, size));
  return out;
}

class TempDir {
 public:
  TempDir() {
    // Short: a unix socket path must fit in 108 bytes.
    std::string pattern = "/tmp/ot-ctl-XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::unique_ptr<Store> openTestStore(const std::filesystem::path& file) {
  StoreOptions options;
  options.url = "sqlite:" + file.string();
  options.poolSize = 4;
  options.acquireTimeoutMs = 5000;
  options.statementTimeoutMs = 5000;
  auto store = openStore(options);
  REQUIRE_MESSAGE(store.ok(), (store.ok() ? "" : store.error().message));
  const Status migrated = (*store)->migrate();
  REQUIRE_MESSAGE(migrated.ok(), (migrated.ok() ? "" : migrated.error().message));
  return std::move(store).value();
}

struct HarnessOptions {
  size_t queueLimit = 10000;
  Store* store = nullptr;  // nullptr: the harness's own SQLite store
  bool serving = true;     // set health to SERVING once started
};

// Members are destroyed in reverse order: the server stops before the services and the store.
class Harness {
 public:
  explicit Harness(HarnessOptions options = {})
      : ownStore_(openTestStore(dir_.path() / "store.db")),
        store_(options.store != nullptr ? *options.store : *ownStore_),
        hub_(registry_,
             RelayHubOptions{options.queueLimit, "controld-test", [] { return kNowMs; }}),
        service_(store_, registry_, hub_,
                 ControlServiceOptions{std::chrono::milliseconds(4000),
                                       std::chrono::milliseconds(2000), [] { return kNowMs; }}),
        server_(GrpcServerOptions{socketPath(), std::chrono::milliseconds(1000)}, service_, hub_) {
    const Status started = server_.start();
    REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().message));
    if (options.serving) server_.setServing(true);
  }

  [[nodiscard]] std::string socketPath() const { return (dir_.path() / "control.sock").string(); }
  [[nodiscard]] std::shared_ptr<grpc::Channel> connect() const {
    auto channel = grpc::CreateChannel(server_.target(), grpc::InsecureChannelCredentials());
    REQUIRE(channel->WaitForConnected(soon(10)));
    return channel;
  }
  [[nodiscard]] std::unique_ptr<cv1::RelayControl::Stub> stub() const {
    return cv1::RelayControl::NewStub(connect());
  }

  Store& store() { return store_; }
  BridgeRegistry& registry() { return registry_; }
  RelayHub& hub() { return hub_; }
  GrpcServer& server() { return server_; }
  const std::filesystem::path& dir() const { return dir_.path(); }

  // Inserts the tunnel and returns it as stored.
  StoredTunnel addTunnel(const TunnelRecord& record) {
    auto revision = store_.insertTunnel(record);
    REQUIRE(revision.ok());
    return StoredTunnel{record, *revision};
  }

 private:
  TempDir dir_;
  std::unique_ptr<Store> ownStore_;
  Store& store_;
  BridgeRegistry registry_;
  RelayHub hub_;
  ControlService service_;
  GrpcServer server_;
};

// One row of usage_hourly in a SQLite store file; -1s when there is none.
struct UsageInDb {
  long long bytesIn = -1, bytesOut = -1, connections = -1;
};

inline UsageInDb usageInDb(const std::filesystem::path& file, const std::string& tunnel,
                           int64_t hour) {
  soci::session sql(soci::sqlite3, "db=" + file.string());
  UsageInDb usage;
  const long long hourStart = hour;
  sql << "SELECT bytes_in, bytes_out, connections FROM usage_hourly"
         " WHERE tunnel_id = :t AND hour_start = :h",
      soci::into(usage.bytesIn), soci::into(usage.bytesOut), soci::into(usage.connections),
      soci::use(tunnel), soci::use(hourStart);
  return usage;
}

// relayd's end of one Session stream.
class RelayClient {
 public:
  using Stream = grpc::ClientReaderWriter<cv1::RelayMessage, cv1::ControlMessage>;

  explicit RelayClient(cv1::RelayControl::Stub& stub) {
    context_.set_deadline(soon(60));
    stream_ = stub.Session(&context_);
    REQUIRE(stream_ != nullptr);
  }

  // Sends Hello and reads SessionAccepted.
  cv1::SessionAccepted hello(const std::string& machineId, uint64_t epoch, bool draining = false) {
    cv1::RelayMessage message;
    message.mutable_hello()->set_machine_id(machineId);
    message.mutable_hello()->set_epoch(epoch);
    message.mutable_hello()->set_started_at_unix_ms(kNowMs - 60'000);
    message.mutable_hello()->set_version("0.1.0-test");
    message.mutable_hello()->set_draining(draining);
    REQUIRE(stream_->Write(message));
    const cv1::ControlMessage accepted = read();
    REQUIRE(accepted.kind_case() == cv1::ControlMessage::kAccepted);
    return accepted.accepted();
  }

  void write(const cv1::RelayMessage& message) { REQUIRE(stream_->Write(message)); }

  void snapshot(const std::vector<cv1::Bridge>& bridges, bool last) {
    cv1::RelayMessage message;
    for (const auto& bridge : bridges) *message.mutable_snapshot()->add_bridges() = bridge;
    message.mutable_snapshot()->set_last(last);
    write(message);
  }
  void attached(const cv1::Bridge& bridge) {
    cv1::RelayMessage message;
    *message.mutable_attached()->mutable_bridge() = bridge;
    write(message);
  }
  void detached(const std::string& bridgeId, const std::string& tunnelId) {
    cv1::RelayMessage message;
    message.mutable_detached()->set_bridge_id(bridgeId);
    message.mutable_detached()->set_tunnel_id(tunnelId);
    message.mutable_detached()->set_reason(cv1::DETACH_REASON_CLIENT_CLOSE);
    message.mutable_detached()->set_detached_at_unix_ms(kNowMs);
    write(message);
  }

  cv1::ControlMessage read() {
    cv1::ControlMessage message;
    REQUIRE(stream_->Read(&message));
    return message;
  }
  // Reads until the server ends the stream; returns how many messages came first.
  size_t drain() {
    cv1::ControlMessage message;
    size_t count = 0;
    while (stream_->Read(&message)) ++count;
    return count;
  }
  // relayd closes its side and waits for the server's status.
  grpc::Status close() {
    stream_->WritesDone();
    drain();
    return stream_->Finish();
  }
  grpc::Status finish() { return stream_->Finish(); }
  void cancel() { context_.TryCancel(); }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<Stream> stream_;
};

// The bridge ids the registry holds for a tunnel.
inline std::set<std::string> bridgeIds(const BridgeRegistry& registry,
                                       const std::string& tunnelId) {
  std::set<std::string> ids;
  for (const auto& bridge : registry.bridgesOf(tunnelId)) ids.insert(bridge.bridgeId);
  return ids;
}

// The next message must be this sentinel deletion: proves nothing else was queued before it.
inline void expectSentinel(RelayHub& hub, RelayClient& relay) {
  hub.publishDeleted("sentinel");
  const cv1::ControlMessage message = relay.read();
  REQUIRE(message.kind_case() == cv1::ControlMessage::kTunnelDeleted);
  CHECK(message.tunnel_deleted().tunnel_id() == "sentinel");
}

}  // namespace ot::controld::testing
