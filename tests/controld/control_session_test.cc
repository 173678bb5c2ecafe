// controld's relay sessions over a real gRPC server on a unix socket (see control_harness.h):
// hello, snapshots and deltas into the bridge registry, record and certificate pushes, commands
// and acks, counters, draining, reconnects, shutdown and the bounded session queue.
#include <algorithm>
#include <mutex>
#include <set>

#include "controld/relays/record_convert.h"
#include "controld/relays/usage_recorder.h"
#include "tests/controld/control_harness.h"

namespace ot::controld {
namespace {

using testing::bridgeIds;
using testing::eventually;
using testing::expectSentinel;
using testing::Harness;
using testing::HarnessOptions;
using testing::kNowMs;
using testing::makeBridge;
using testing::readyTunnel;
using testing::RelayClient;
using testing::sha256Bytes;

TEST_CASE("control: a session must start with hello") {
  Harness h;
  auto stub = h.stub();

  SUBCASE("a snapshot first") {
    RelayClient relay(*stub);
    relay.snapshot({}, true);
    CHECK(relay.drain() == 0);
    const grpc::Status status = relay.finish();
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(status.error_message() == "the first message of a session must be hello");
  }
  SUBCASE("a hello without machine id") {
    RelayClient relay(*stub);
    cv1::RelayMessage hello;
    hello.mutable_hello()->set_epoch(1);
    relay.write(hello);
    CHECK(relay.drain() == 0);
    CHECK(relay.finish().error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  SUBCASE("a second hello ends the session and drops its bridges") {
    RelayClient relay(*stub);
    relay.hello("machine-a", 1);
    relay.snapshot({makeBridge("a1", "alpha")}, true);
    REQUIRE(eventually([&] { return h.registry().bridgeCount("alpha") == 1; }));
    cv1::RelayMessage hello;
    hello.mutable_hello()->set_machine_id("machine-a");
    relay.write(hello);
    relay.drain();
    CHECK(relay.finish().error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(eventually([&] { return h.registry().bridgeCount("alpha") == 0; }));
    CHECK(eventually([&] { return h.hub().relays().empty(); }));
  }
  CHECK(h.hub().relays().empty());
}

TEST_CASE("control: hello is answered with SessionAccepted, then the API certificate") {
  Harness h;
  auto stub = h.stub();
  const auto first = testing::selfSignedCertificate("api.tunnels.test");
  h.hub().publishApiCertificate(first.pem);

  RelayClient relay(*stub);
  const cv1::SessionAccepted accepted = relay.hello("machine-a", 0x9e3779b97f4a7c15, true);
  CHECK(accepted.instance_id() == "controld-test");
  CHECK(accepted.server_time_unix_ms() == kNowMs);
  cv1::ControlMessage message = relay.read();
  REQUIRE(message.kind_case() == cv1::ControlMessage::kApiCertificate);
  CHECK(message.api_certificate().certificate_chain_pem() == first.pem.chainPem);
  CHECK(message.api_certificate().private_key_pem() == first.pem.keyPem);
  CHECK(message.api_certificate().not_after_unix_ms() == first.pem.notAfterMs);
  CHECK(message.api_certificate().fingerprint_sha256() == first.fingerprint);

  const auto relays = h.hub().relays();
  REQUIRE(relays.size() == 1);
  CHECK(relays[0].relayKey == "machine-a/11400714819323198485");
  CHECK(relays[0].machineId == "machine-a");
  CHECK(relays[0].version == "0.1.0-test");
  CHECK(relays[0].draining);  // the hello said so
  CHECK_FALSE(relays[0].snapshotComplete);

  // A renewal reaches the live session; a chain without a certificate is not pushed.
  const auto second = testing::selfSignedCertificate("api.tunnels.test");
  h.hub().publishApiCertificate(second.pem);
  message = relay.read();
  REQUIRE(message.kind_case() == cv1::ControlMessage::kApiCertificate);
  CHECK(message.api_certificate().fingerprint_sha256() == second.fingerprint);
  CHECK(second.fingerprint != first.fingerprint);
  h.hub().publishApiCertificate(ApiCertificatePem{"not a certificate", "key", 1});
  expectSentinel(h.hub(), relay);

  // A new session gets the latest certificate.
  RelayClient other(*stub);
  other.hello("machine-b", 1);
  message = other.read();
  REQUIRE(message.kind_case() == cv1::ControlMessage::kApiCertificate);
  CHECK(message.api_certificate().fingerprint_sha256() == second.fingerprint);
  REQUIRE(relay.close().ok());
  REQUIRE(other.close().ok());
}

TEST_CASE("control: a snapshot in parts becomes the relay's bridges; their records follow") {
  Harness h;
  const StoredTunnel alpha = h.addTunnel(readyTunnel("alpha"));
  TunnelRecord betaRecord = readyTunnel("beta");
  betaRecord.deletedAtMs = kNowMs - 5;
  const StoredTunnel beta = h.addTunnel(betaRecord);
  h.addTunnel(readyTunnel("gamma"));  // no bridge: not pushed
  auto stub = h.stub();

  RelayClient relay(*stub);
  relay.hello("machine-a", 1);
  relay.snapshot({makeBridge("a1", "alpha", {"", "api"}), makeBridge("a2", "beta")}, false);
  // Deltas that arrive before the last part apply to the snapshot being collected.
  relay.attached(makeBridge("a3", "alpha", {"web"}));
  relay.detached("a1", "alpha");
  relay.snapshot({makeBridge("a4", "delta")}, true);  // delta is not in the store

  // Sorted by tunnel: alpha's record, beta's deletion; nothing for delta or gamma.
  cv1::ControlMessage message = relay.read();
  REQUIRE(message.kind_case() == cv1::ControlMessage::kTunnel);
  CHECK(message.tunnel().tunnel_id() == "alpha");
  CHECK(message.tunnel().revision() == static_cast<uint64_t>(alpha.revision));
  CHECK(message.tunnel().token_sha256() == sha256Bytes("token-alpha"));
  CHECK(message.tunnel().hostname() == "alpha.tunnels.test");
  CHECK(message.tunnel().certificate_state() == cv1::CERTIFICATE_STATE_READY);
  CHECK(message.tunnel().cert_ready());
  CHECK_FALSE(message.tunnel().deleted());
  message = relay.read();
  REQUIRE(message.kind_case() == cv1::ControlMessage::kTunnelDeleted);
  CHECK(message.tunnel_deleted().tunnel_id() == "beta");
  CHECK(message.tunnel_deleted().revision() == static_cast<uint64_t>(beta.revision));
  expectSentinel(h.hub(), relay);

  CHECK(bridgeIds(h.registry(), "alpha") == std::set<std::string>{"a3"});
  CHECK(bridgeIds(h.registry(), "beta") == std::set<std::string>{"a2"});
  CHECK(bridgeIds(h.registry(), "delta") == std::set<std::string>{"a4"});
  const auto a3 = h.registry().bridgesOf("alpha");
  REQUIRE(a3.size() == 1);
  CHECK(a3[0].routes == std::vector<std::string>{"web"});
  CHECK(a3[0].origin == "laptop");
  CHECK(a3[0].profile == "wss-443");
  CHECK(a3[0].maxConns == 64);
  CHECK(a3[0].attachedAtMs == kNowMs - 1000);
  CHECK(a3[0].peerAddress == "192.0.2.7:40000");
  CHECK(h.registry().totals().bridges == 3);
  CHECK(h.hub().relays().at(0).snapshotComplete);

  SUBCASE("then attached and detached deltas") {
    relay.attached(makeBridge("a5", "alpha", {"db"}));
    relay.detached("a3", "alpha");
    relay.detached("a2", "beta");
    relay.detached("nosuch", "alpha");  // unknown: ignored
    CHECK(eventually([&] {
      return bridgeIds(h.registry(), "alpha") == std::set<std::string>{"a5"} &&
             h.registry().bridgeCount("beta") == 0;
    }));
    CHECK(h.registry().totals().bridges == 2);
  }
  SUBCASE("a second snapshot breaks the contract") {
    relay.snapshot({}, true);
    relay.drain();
    CHECK(relay.finish().error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(eventually([&] { return h.registry().totals().bridges == 0; }));
  }
}

TEST_CASE("control: after the snapshot, the records of tunnels with a direct origin follow") {
  Harness h;
  h.addTunnel(readyTunnel("alpha"));
  TunnelRecord direct = readyTunnel("direct1");
  direct.origins = {OriginEntry{"web-1", kNowMs, std::nullopt},
                    OriginEntry{"web-2", kNowMs, DirectTarget{"origin.example:8443", 3}}};
  const StoredTunnel stored = h.addTunnel(direct);
  TunnelRecord gone = readyTunnel("direct2");
  gone.origins = {OriginEntry{"web-1", kNowMs, DirectTarget{"origin.example:8443", 2}}};
  gone.deletedAtMs = kNowMs - 5;
  h.addTunnel(gone);
  TunnelRecord reverse = readyTunnel("gamma");
  reverse.origins = {OriginEntry{"web-1", kNowMs, std::nullopt}};
  h.addTunnel(reverse);
  auto stub = h.stub();

  RelayClient relay(*stub);
  relay.hello("machine-a", 1);
  relay.snapshot({makeBridge("a1", "alpha")}, true);
  // alpha for its bridge, then direct1 though the relay holds none of its bridges: the relay
  // dials its origin web-2. Nothing for gamma (no direct origin) or the deleted direct2.
  cv1::ControlMessage message = relay.read();
  REQUIRE(message.kind_case() == cv1::ControlMessage::kTunnel);
  CHECK(message.tunnel().tunnel_id() == "alpha");
  message = relay.read();
  REQUIRE(message.kind_case() == cv1::ControlMessage::kTunnel);
  CHECK(message.tunnel().tunnel_id() == "direct1");
  // (Its origins, direct target included, are the record conversion's: origin_direct_test.cc.)
  CHECK(message.tunnel().revision() == static_cast<uint64_t>(stored.revision));
  expectSentinel(h.hub(), relay);
  REQUIRE(relay.close().ok());
}

TEST_CASE("control: a RelayBatch is offered and its messages apply in order, as if sent alone") {
  Harness h;
  auto stub = h.stub();
  RelayClient relay(*stub);
  const cv1::SessionAccepted accepted = relay.hello("machine-a", 1);
  CHECK(accepted.accepts_batches());
  relay.snapshot({makeBridge("a1", "alpha")}, true);
  REQUIRE(eventually([&] { return h.registry().bridgeCount("alpha") == 1; }));

  auto attached = [](const cv1::Bridge& bridge) {
    cv1::RelayMessage message;
    *message.mutable_attached()->mutable_bridge() = bridge;
    return message;
  };
  auto detached = [](const std::string& bridgeId, const std::string& tunnelId) {
    cv1::RelayMessage message;
    message.mutable_detached()->set_bridge_id(bridgeId);
    message.mutable_detached()->set_tunnel_id(tunnelId);
    return message;
  };
  cv1::RelayMessage batch;
  auto* messages = batch.mutable_batch()->mutable_messages();
  *messages->Add() = attached(makeBridge("a2", "alpha"));
  *messages->Add() = detached("a1", "alpha");
  *messages->Add() = attached(makeBridge("b1", "beta"));
  *messages->Add() = detached("b1", "beta");  // after its attach: gone
  *messages->Add() = attached(makeBridge("b2", "beta"));

  SUBCASE("deltas") {
    relay.write(batch);
    CHECK(eventually([&] {
      return bridgeIds(h.registry(), "alpha") == std::set<std::string>{"a2"} &&
             bridgeIds(h.registry(), "beta") == std::set<std::string>{"b2"};
    }));
    CHECK(h.registry().totals().bridges == 2);
    REQUIRE(relay.close().ok());
  }
  SUBCASE("one that may only come alone ends the session, after what came before it") {
    cv1::RelayMessage hello;
    hello.mutable_hello()->set_machine_id("machine-a");
    *messages->Add() = hello;
    relay.write(batch);
    relay.drain();
    const grpc::Status status = relay.finish();
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(status.error_message() == "a batch may not hold hello, a snapshot part or another batch");
    CHECK(eventually([&] { return h.registry().totals().bridges == 0; }));
  }
}

TEST_CASE("control: records and deletions are published to every live relay session") {
  Harness h;
  const StoredTunnel alpha = h.addTunnel(readyTunnel("alpha"));
  auto stub = h.stub();
  RelayClient a(*stub);
  RelayClient b(*stub);
  a.hello("machine-a", 1);
  b.hello("machine-b", 2);
  REQUIRE(eventually([&] { return h.hub().relays().size() == 2; }));

  // A change: a renewal starts. The record keeps its valid chain, so it stays routable.
  TunnelRecord changed = alpha.record;
  changed.certificate.state = CertificateState::kIssuing;
  auto revision = h.store().updateTunnel(changed, alpha.revision);
  REQUIRE(revision.ok());
  auto reloaded = h.store().getTunnel("alpha");
  REQUIRE(reloaded.ok());
  REQUIRE(reloaded->has_value());
  h.hub().publishRecord(**reloaded);
  for (RelayClient* relay : {&a, &b}) {
    const cv1::ControlMessage message = relay->read();
    REQUIRE(message.kind_case() == cv1::ControlMessage::kTunnel);
    CHECK(message.tunnel().tunnel_id() == "alpha");
    CHECK(message.tunnel().revision() == static_cast<uint64_t>(*revision));
    CHECK(message.tunnel().revision() > static_cast<uint64_t>(alpha.revision));
    CHECK(message.tunnel().certificate_state() == cv1::CERTIFICATE_STATE_ISSUING);
    CHECK(message.tunnel().cert_ready());
  }

  h.hub().publishDeleted("bravo");
  for (RelayClient* relay : {&a, &b}) {
    const cv1::ControlMessage message = relay->read();
    REQUIRE(message.kind_case() == cv1::ControlMessage::kTunnelDeleted);
    CHECK(message.tunnel_deleted().tunnel_id() == "bravo");
    CHECK(message.tunnel_deleted().revision() == 0);
  }

  // A record that was deleted goes out as a deletion with the deleting write's revision.
  changed.deletedAtMs = kNowMs;
  auto deletedRevision = h.store().updateTunnel(changed, *revision);
  REQUIRE(deletedRevision.ok());
  h.hub().publishRecord(StoredTunnel{changed, *deletedRevision});
  for (RelayClient* relay : {&a, &b}) {
    const cv1::ControlMessage message = relay->read();
    REQUIRE(message.kind_case() == cv1::ControlMessage::kTunnelDeleted);
    CHECK(message.tunnel_deleted().tunnel_id() == "alpha");
    CHECK(message.tunnel_deleted().revision() == static_cast<uint64_t>(*deletedRevision));
  }
  REQUIRE(a.close().ok());
  REQUIRE(b.close().ok());
}

TEST_CASE("control: a relay session that ends drops only that relay's bridges") {
  Harness h;
  auto stub = h.stub();
  RelayClient a(*stub);
  RelayClient b(*stub);
  a.hello("machine-a", 1);
  a.snapshot({makeBridge("a1", "alpha"), makeBridge("a2", "shared")}, true);
  b.hello("machine-b", 2);
  b.snapshot({makeBridge("b1", "bravo"), makeBridge("b2", "shared")}, true);
  REQUIRE(eventually([&] { return h.registry().totals().bridges == 4; }));
  CHECK(h.registry().totals().relays == 2);
  CHECK(h.registry().bridgeCount("shared") == 2);

  SUBCASE("relayd closes its side") {
    CHECK(a.close().ok());
  }
  SUBCASE("relayd goes away") {
    a.cancel();
    CHECK(a.finish().error_code() == grpc::StatusCode::CANCELLED);
  }
  CHECK(eventually([&] { return h.registry().bridgeCount("alpha") == 0; }));
  CHECK(h.registry().bridgeCount("shared") == 1);
  CHECK(h.registry().bridgeCount("bravo") == 1);
  CHECK(h.registry().totals().relays == 1);
  CHECK(eventually([&] { return h.hub().relays().size() == 1; }));
  CHECK(h.hub().relays().at(0).relayKey == "machine-b/2");

  // The other session goes on.
  h.hub().publishDeleted("x");
  CHECK(b.read().tunnel_deleted().tunnel_id() == "x");
  CHECK(b.close().ok());
  CHECK(eventually([&] { return h.registry().totals().bridges == 0; }));
}

TEST_CASE("control: a relay that reconnects with the same epoch replaces its old session") {
  Harness h;
  auto stub = h.stub();
  RelayClient first(*stub);
  first.hello("machine-a", 7);
  first.snapshot({makeBridge("a1", "alpha")}, true);
  REQUIRE(eventually([&] { return h.registry().bridgeCount("alpha") == 1; }));

  RelayClient second(*stub);
  second.hello("machine-a", 7);
  // The old stream is cancelled; its end drops nothing: the bridges are the relay's, not the
  // stream's, and the new snapshot replaces them.
  first.drain();
  CHECK(first.finish().error_code() == grpc::StatusCode::CANCELLED);
  CHECK(h.registry().bridgeCount("alpha") == 1);
  second.snapshot({makeBridge("a2", "alpha"), makeBridge("a3", "alpha")}, true);
  CHECK(eventually([&] {
    return bridgeIds(h.registry(), "alpha") == std::set<std::string>{"a2", "a3"};
  }));
  const auto relays = h.hub().relays();
  REQUIRE(relays.size() == 1);
  CHECK(relays[0].relayKey == "machine-a/7");
  CHECK(h.registry().totals().relays == 1);
  REQUIRE(second.close().ok());
  CHECK(eventually([&] { return h.registry().totals().bridges == 0; }));
}

TEST_CASE("control: the hub ignores a superseded session and keeps the bridges on shutdown") {
  BridgeRegistry registry;
  RelayHub hub(registry, RelayHubOptions{100, "hub-test", [] { return kNowMs; }});
  int cancelledFirst = 0;
  cv1::Hello hello;
  hello.set_machine_id("m");
  hello.set_epoch(3);
  auto first = hub.open(hello, [&] { ++cancelledFirst; });
  REQUIRE(first != nullptr);
  CHECK(first->relayKey() == "m/3");
  hub.snapshotComplete(first, {BridgeEntry{"b1", "alpha", {""}, "", "", 1, 1, "", 0}});
  CHECK(registry.bridgeCount("alpha") == 1);

  int cancelledSecond = 0;
  auto second = hub.open(hello, [&] { ++cancelledSecond; });
  REQUIRE(second != nullptr);
  CHECK(cancelledFirst == 1);
  // The old session's late messages and its end change nothing.
  hub.bridgeAttached(first, BridgeEntry{"b9", "alpha", {""}, "", "", 1, 1, "", 0});
  hub.snapshotComplete(first, {});
  CHECK_FALSE(hub.close(first));
  CHECK(bridgeIds(registry, "alpha") == std::set<std::string>{"b1"});
  CHECK_FALSE(first->outbox().push(cv1::ControlMessage()));  // closed

  hub.bridgeAttached(second, BridgeEntry{"b2", "alpha", {"x"}, "", "", 1, 1, "", 0});
  CHECK(bridgeIds(registry, "alpha") == std::set<std::string>{"b1", "b2"});
  hub.shutdown();
  CHECK(cancelledSecond == 1);
  CHECK_FALSE(hub.close(second));  // controld stopping: the bridges stay
  CHECK(registry.bridgeCount("alpha") == 2);
  CHECK(hub.open(hello, [] {}) == nullptr);
  CHECK(hub.relays().empty());
}

TEST_CASE("control: stopping controld ends relay sessions but keeps their bridges") {
  Harness h;
  auto stub = h.stub();
  RelayClient a(*stub);
  a.hello("machine-a", 1);
  a.snapshot({makeBridge("a1", "alpha")}, true);
  REQUIRE(eventually([&] { return h.registry().bridgeCount("alpha") == 1; }));
  h.server().stop();  // returns once every handler has
  CHECK_FALSE(h.server().running());
  a.drain();
  CHECK_FALSE(a.finish().ok());
  CHECK(h.registry().bridgeCount("alpha") == 1);
  CHECK(h.hub().relays().empty());
  CHECK_FALSE(std::filesystem::exists(h.socketPath()));
}

TEST_CASE("control: commands go to one relay or to all; acks reach the handler") {
  Harness h;
  std::mutex mutex;
  std::vector<std::pair<std::string, cv1::Ack>> acks;
  h.hub().setAckHandler([&](const std::string& relayKey, const cv1::Ack& ack) {
    const std::lock_guard lock(mutex);
    acks.emplace_back(relayKey, ack);
  });
  auto stub = h.stub();
  RelayClient a(*stub);
  RelayClient b(*stub);
  a.hello("machine-a", 1);
  b.hello("machine-b", 2);
  REQUIRE(eventually([&] { return h.hub().relays().size() == 2; }));

  cv1::Command closeBridge;
  closeBridge.mutable_close_bridge()->set_bridge_id("a1");
  closeBridge.mutable_close_bridge()->set_reason(cv1::DETACH_REASON_SERVER_CLOSE);
  const auto one = h.hub().sendCommand("machine-a/1", closeBridge);
  CHECK(one.relays == 1);
  cv1::ControlMessage message = a.read();
  REQUIRE(message.kind_case() == cv1::ControlMessage::kCommand);
  CHECK(message.command().id() == one.id);
  REQUIRE(message.command().action_case() == cv1::Command::kCloseBridge);
  CHECK(message.command().close_bridge().bridge_id() == "a1");

  cv1::Command drain;
  drain.mutable_drain_tunnel()->set_tunnel_id("alpha");
  const auto all = h.hub().sendCommand("", drain);
  CHECK(all.relays == 2);
  CHECK(all.id != one.id);
  for (RelayClient* relay : {&a, &b}) {
    message = relay->read();
    REQUIRE(message.kind_case() == cv1::ControlMessage::kCommand);
    CHECK(message.command().id() == all.id);
    CHECK(message.command().drain_tunnel().tunnel_id() == "alpha");
  }
  CHECK(h.hub().sendCommand("machine-c/1", drain).relays == 0);

  cv1::RelayMessage ack;
  ack.mutable_ack()->set_command_id(one.id);
  ack.mutable_ack()->set_status(cv1::ACK_STATUS_OK);
  ack.mutable_ack()->set_bridges_affected(1);
  a.write(ack);
  ack.mutable_ack()->set_command_id(all.id);
  ack.mutable_ack()->set_status(cv1::ACK_STATUS_NOT_FOUND);
  ack.mutable_ack()->set_bridges_affected(0);
  b.write(ack);
  REQUIRE(eventually([&] {
    const std::lock_guard lock(mutex);
    return acks.size() == 2;
  }));
  const std::lock_guard lock(mutex);
  std::sort(acks.begin(), acks.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  CHECK(acks[0].first == "machine-a/1");
  CHECK(acks[0].second.command_id() == one.id);
  CHECK(acks[0].second.bridges_affected() == 1);
  CHECK(acks[1].first == "machine-b/2");
  CHECK(acks[1].second.status() == cv1::ACK_STATUS_NOT_FOUND);
}

TEST_CASE("control: counters reach the usage recorder; draining keeps the relay's bridges") {
  Harness h;
  UsageRecorder recorder(h.store(), UsageRecorderOptions{std::chrono::milliseconds(60'000), 1000,
                                                         [] { return kNowMs; }});
  std::mutex mutex;
  std::vector<std::string> reporters;
  h.hub().setCountersHandler([&](const std::string& relayKey, const cv1::Counters& counters) {
    {
      const std::lock_guard lock(mutex);
      reporters.push_back(relayKey);
    }
    recorder.add(counters);
  });
  auto stub = h.stub();
  RelayClient relay(*stub);
  relay.hello("machine-a", 1);
  relay.snapshot({makeBridge("a1", "alpha")}, true);

  cv1::RelayMessage report;
  report.mutable_counters()->set_interval_start_unix_ms(kNowMs - 10'000);
  report.mutable_counters()->set_interval_end_unix_ms(kNowMs);
  auto* alpha = report.mutable_counters()->add_tunnels();
  alpha->set_tunnel_id("alpha");
  alpha->set_bytes_in(100);
  alpha->set_bytes_out(2000);
  alpha->set_connections(3);
  alpha->set_rejected_connections(1);
  report.mutable_counters()->add_tunnels()->set_tunnel_id("idle");  // all zero: no row
  relay.write(report);
  relay.write(report);
  REQUIRE(eventually([&] {
    const std::lock_guard lock(mutex);
    return reporters.size() == 2;
  }));
  CHECK(reporters[0] == "machine-a/1");
  CHECK(recorder.pending() == 1);
  REQUIRE(recorder.flush().ok());
  CHECK(recorder.pending() == 0);
  const testing::UsageInDb usage =
      testing::usageInDb(h.dir() / "store.db", "alpha", hourStart(kNowMs));
  CHECK(usage.bytesIn == 200);
  CHECK(usage.bytesOut == 4000);
  CHECK(usage.connections == 6);

  cv1::RelayMessage draining;
  draining.mutable_draining()->set_deadline_unix_ms(kNowMs + 30'000);
  relay.write(draining);
  CHECK(eventually([&] { return h.hub().relays().at(0).draining; }));
  CHECK(h.registry().bridgeCount("alpha") == 1);
  REQUIRE(relay.close().ok());
}

TEST_CASE("control: overflowing one relay session's queue ends only that session") {
  Harness h(HarnessOptions{16});
  const StoredTunnel bravo = h.addTunnel(readyTunnel("bravo"));
  auto stub = h.stub();
  RelayClient a(*stub);
  RelayClient b(*stub);
  a.hello("machine-a", 1);
  a.snapshot({makeBridge("a1", "alpha")}, true);
  b.hello("machine-b", 2);
  b.snapshot({makeBridge("b1", "bravo")}, true);
  REQUIRE(b.read().tunnel().tunnel_id() == "bravo");
  REQUIRE(eventually([&] { return h.registry().totals().bridges == 2; }));

  // relayd A stops reading. Large commands fill the stream's flow-control window, then its queue.
  cv1::Command drain;
  drain.mutable_drain_tunnel()->set_tunnel_id(std::string(256 * 1024, 'x'));
  bool refused = false;
  for (int i = 0; i < 4000 && !refused; ++i) {
    refused = h.hub().sendCommand("machine-a/1", drain).relays == 0;
  }
  REQUIRE(refused);
  a.drain();
  CHECK(a.finish().error_code() == grpc::StatusCode::CANCELLED);
  CHECK(eventually([&] { return h.registry().bridgeCount("alpha") == 0; }));
  CHECK(eventually([&] { return h.hub().relays().size() == 1; }));

  // B never noticed.
  CHECK(h.registry().bridgeCount("bravo") == 1);
  h.hub().publishRecord(bravo);
  const cv1::ControlMessage message = b.read();
  REQUIRE(message.kind_case() == cv1::ControlMessage::kTunnel);
  CHECK(message.tunnel().tunnel_id() == "bravo");
  REQUIRE(b.close().ok());
}

}  // namespace
}  // namespace ot::controld
