// ControlClient against an in-process fake RelayControl service on a unix socket, with the client
// on a private libuv loop; and the pure pieces behind it (relayd/control_mirror.h).
#include "relayd/control_client.h"

#include <doctest/doctest.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <uv.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/metrics.h"
#include "opentunnel/control/v1/control.grpc.pb.h"
#include "relayd/control_mirror.h"
#include "relayd/relay.h"
#include "relayd/relay_context.h"
#include "relayd/relay_metrics.h"
#include "relayd/relay_stats.h"
#include "relayd/relayd_config.h"

namespace {

namespace v1 = ::opentunnel::control::v1;
using ot::ErrorKind;
using ot::Result;
using ot::relayd::BridgeMirror;
using ot::relayd::ControlClient;
using ot::relayd::ControlClientOptions;
using ot::relayd::ControlEvents;
using ot::relayd::ReconnectBackoff;
using ot::relayd::Relay;
using ot::relayd::RelayContext;
using ot::relayd::RelaydConfig;
using ot::relayd::RelayMetrics;
using ot::relayd::UsageTally;

bool same(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

v1::Bridge makeBridge(const std::string& id, const std::string& tunnel) {
  v1::Bridge bridge;
  bridge.set_bridge_id(id);
  bridge.set_tunnel_id(tunnel);
  bridge.add_routes("");
  bridge.add_routes("api");
  bridge.set_origin("laptop");
  bridge.set_profile("wss-443");
  bridge.set_max_conns(64);
  bridge.set_attached_at_unix_ms(1'700'000'000'000);
  bridge.set_peer_address("192.0.2.7:40000");
  return bridge;
}

std::vector<std::string> bridgeIds(const v1::BridgeSnapshot& snapshot) {
  std::vector<std::string> ids;
  for (const auto& bridge : snapshot.bridges()) ids.push_back(bridge.bridge_id());
  return ids;
}

// ---- the fake controld

// One Session stream as the fake saw it.
struct ControlFakeStream {
  std::vector<v1::RelayMessage> received;
  std::deque<v1::ControlMessage> outgoing;
  bool closeRequested = false;
  bool readDone = false;
};

class FakeControl final : public v1::RelayControl::Service {
 public:
  // Called from the server's threads after every change the test may wait for.
  std::function<void()> onChange;

  size_t streams() {
    std::lock_guard lock(mutex_);
    return streams_.size();
  }
  size_t refused() {
    std::lock_guard lock(mutex_);
    return refused_;
  }
  std::vector<v1::RelayMessage> received(size_t stream) {
    std::lock_guard lock(mutex_);
    if (stream >= streams_.size()) return {};
    return streams_[stream]->received;
  }
  bool ended(size_t stream) {
    std::lock_guard lock(mutex_);
    return stream < streams_.size() && streams_[stream]->readDone;
  }
  void push(v1::ControlMessage message) {
    std::lock_guard lock(mutex_);
    REQUIRE(!streams_.empty());
    streams_.back()->outgoing.push_back(std::move(message));
    cv_.notify_all();
  }
  // Ends the newest stream from the server's side (the client sees CANCELLED).
  void closeLatest() {
    std::lock_guard lock(mutex_);
    REQUIRE(!streams_.empty());
    streams_.back()->closeRequested = true;
    cv_.notify_all();
  }
  // What the fake answers Hello with (SessionAccepted unless changed); nullopt: nothing at all.
  void setGreeting(std::optional<v1::ControlMessage> greeting) {
    std::lock_guard lock(mutex_);
    greeting_ = std::move(greeting);
  }
  static v1::ControlMessage accepted() {
    v1::ControlMessage message;
    message.mutable_accepted()->set_instance_id("fake-controld");
    message.mutable_accepted()->set_server_time_unix_ms(1'700'000'000'000);
    return message;
  }
  // While set, new sessions are answered UNAVAILABLE at once.
  void setRefuse(bool refuse) {
    std::lock_guard lock(mutex_);
    refuse_ = refuse;
  }
  std::optional<v1::AuthorizeAttachRequest> lastAuthorize() {
    std::lock_guard lock(mutex_);
    return lastAuthorize_;
  }
  bool slowStarted() {
    std::lock_guard lock(mutex_);
    return slowStarted_;
  }
  // How many FetchTunnel calls asked for `tunnelId`.
  size_t fetches(const std::string& tunnelId) {
    std::lock_guard lock(mutex_);
    return fetches_[tunnelId];
  }
  bool slowCancelled() {
    std::lock_guard lock(mutex_);
    return slowCancelled_;
  }

  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::ControlMessage, v1::RelayMessage>* stream) override {
    auto record = std::make_shared<ControlFakeStream>();
    {
      std::lock_guard lock(mutex_);
      if (refuse_) {
        ++refused_;
        changed();
        return {grpc::StatusCode::UNAVAILABLE, "refused by the test"};
      }
      streams_.push_back(record);
    }
    changed();
    std::thread reader([&] {
      v1::RelayMessage message;
      while (stream->Read(&message)) {
        {
          std::lock_guard lock(mutex_);
          if (record->received.empty() && message.has_hello() && greeting_.has_value()) {
            record->outgoing.push_back(*greeting_);
          }
          record->received.push_back(message);
          cv_.notify_all();
        }
        changed();
      }
      std::lock_guard lock(mutex_);
      record->readDone = true;
      cv_.notify_all();
    });
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] {
        return record->closeRequested || record->readDone || !record->outgoing.empty();
      });
      if (record->closeRequested) {
        context->TryCancel();
        break;
      }
      if (!record->outgoing.empty()) {
        v1::ControlMessage message = std::move(record->outgoing.front());
        record->outgoing.pop_front();
        lock.unlock();
        const bool ok = stream->Write(message);
        lock.lock();
        if (!ok) {
          context->TryCancel();
          break;
        }
        continue;
      }
      break;  // the client half-closed
    }
    lock.unlock();
    reader.join();
    changed();
    return grpc::Status::OK;
  }

  grpc::Status AuthorizeAttach(grpc::ServerContext* context,
                               const v1::AuthorizeAttachRequest* request,
                               v1::AuthorizeAttachResponse* response) override {
    {
      std::lock_guard lock(mutex_);
      lastAuthorize_ = *request;
    }
    if (request->token() == "slow") {
      // Holds the call until the client gives up on it.
      {
        std::lock_guard lock(mutex_);
        slowStarted_ = true;
      }
      changed();
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      std::unique_lock lock(mutex_);
      while (!context->IsCancelled() && std::chrono::steady_clock::now() < until) {
        cv_.wait_for(lock, std::chrono::milliseconds(5));
      }
      slowCancelled_ = context->IsCancelled();
      lock.unlock();
      changed();
      return {grpc::StatusCode::CANCELLED, "gave up"};
    }
    if (request->token() != "good") {
      response->set_result(v1::ATTACH_RESULT_BAD_TOKEN);
      response->set_message("token does not match");
      return grpc::Status::OK;
    }
    response->set_result(v1::ATTACH_RESULT_OK);
    response->mutable_record()->set_tunnel_id(request->tunnel_id());
    response->mutable_record()->set_revision(4);
    return grpc::Status::OK;
  }

  grpc::Status FetchTunnel(grpc::ServerContext*, const v1::FetchTunnelRequest* request,
                           v1::FetchTunnelResponse* response) override {
    {
      std::lock_guard lock(mutex_);
      ++fetches_[request->tunnel_id()];
    }
    if (request->tunnel_id() == "t1") {
      response->set_found(true);
      response->mutable_record()->set_tunnel_id("t1");
      response->mutable_record()->set_revision(9);
      response->mutable_record()->set_hostname("t1.tunnels.test");
    }
    return grpc::Status::OK;
  }

 private:
  void changed() {
    if (onChange) onChange();
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<ControlFakeStream>> streams_;
  size_t refused_ = 0;
  bool refuse_ = false;
  std::optional<v1::ControlMessage> greeting_ = accepted();
  std::optional<v1::AuthorizeAttachRequest> lastAuthorize_;
  bool slowStarted_ = false;
  bool slowCancelled_ = false;
  std::map<std::string, size_t> fetches_;
};

// ---- the test's loop and server

// A private loop, a fake controld on a unix socket in a temporary directory, and runUntil().
// Declare the ControlClient after it, so that the client is stopped first.
struct ControlFixture {
  std::filesystem::path dir;
  std::string socketPath;
  uv_loop_t loop{};
  uv_async_t poke{};  // the fake's threads wake the loop after every change
  uv_timer_t deadline{};
  bool expired = false;
  FakeControl service;
  std::unique_ptr<grpc::Server> server;

  ControlFixture() {
    char pattern[] = "/tmp/ot-control-XXXXXX";
    REQUIRE(mkdtemp(pattern) != nullptr);
    dir = pattern;
    socketPath = (dir / "control.sock").string();
    REQUIRE(uv_loop_init(&loop) == 0);
    REQUIRE(uv_async_init(&loop, &poke, [](uv_async_t*) {}) == 0);
    REQUIRE(uv_timer_init(&loop, &deadline) == 0);
    deadline.data = this;
    service.onChange = [this] { uv_async_send(&poke); };
  }

  ~ControlFixture() {
    stopServer();
    uv_close(reinterpret_cast<uv_handle_t*>(&poke), nullptr);
    uv_close(reinterpret_cast<uv_handle_t*>(&deadline), nullptr);
    uv_run(&loop, UV_RUN_DEFAULT);  // also runs the clients' close callbacks
    CHECK(uv_loop_close(&loop) == 0);
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }

  void startServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socketPath, grpc::InsecureServerCredentials());
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
  }

  void stopServer() {
    if (server == nullptr) return;
    server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server->Wait();
    server.reset();
  }

  ControlClientOptions options() const {
    ControlClientOptions options;
    options.socketPath = socketPath;
    options.machineId = "machine-1";
    options.epoch = 0xfeedbeefcafe;
    options.startedAtUnixMs = 1'700'000'123'456;
    options.version = "0.1.0-test";
    options.reconnectInitialMs = 20;
    options.reconnectMaxMs = 100;
    options.callTimeoutMs = 5'000;
    options.countersIntervalMs = 60'000;
    return options;
  }

  // Runs the loop until `done` holds, or fails after `ms`.
  bool runUntil(const std::function<bool()>& done, uint64_t ms = 10'000) {
    expired = false;
    uv_timer_start(
        &deadline,
        [](uv_timer_t* timer) { static_cast<ControlFixture*>(timer->data)->expired = true; }, ms,
        0);
    while (!done() && !expired) uv_run(&loop, UV_RUN_ONCE);
    uv_timer_stop(&deadline);
    return done();
  }
};

// What the client delivered on the loop, in order.
struct Recorder {
  std::vector<bool> states;
  std::vector<std::string> events;

  ControlEvents callbacks() {
    ControlEvents out;
    out.onSessionState = [this](bool up) { states.push_back(up); };
    out.onTunnel = [this](const v1::TunnelRecord& record) {
      events.push_back("tunnel:" + record.tunnel_id() + "@" + std::to_string(record.revision()));
    };
    out.onTunnelDeleted = [this](const v1::TunnelDeleted& deleted) {
      events.push_back("deleted:" + deleted.tunnel_id());
    };
    out.onApiCertificate = [this](const v1::ApiCertificate& certificate) {
      events.push_back("cert:" + certificate.fingerprint_sha256());
    };
    out.onCommand = [this](const v1::Command& command) {
      events.push_back("command:" + std::to_string(command.id()));
    };
    out.onMeshSnapshot = [this](const v1::MeshTableSnapshot& part) {
      events.push_back("mesh_snapshot:" + std::to_string(part.version()));
    };
    out.onMeshDelta = [this](const v1::MeshTableDelta& delta) {
      events.push_back("mesh_delta:" + std::to_string(delta.version()));
    };
    return out;
  }
};

size_t countKind(const std::vector<v1::RelayMessage>& messages, v1::RelayMessage::KindCase kind) {
  size_t n = 0;
  for (const auto& message : messages) {
    if (message.kind_case() == kind) ++n;
  }
  return n;
}

// The stream delivered Hello and a complete snapshot.
bool snapshotDone(const std::vector<v1::RelayMessage>& messages) {
  return !messages.empty() && messages.back().has_snapshot() && messages.back().snapshot().last();
}

}  // namespace

// ---- pure pieces

TEST_CASE("control mirror: snapshots hold exactly the attached bridges, split in parts") {
  BridgeMirror mirror;
  auto empty = mirror.snapshot();
  REQUIRE(empty.size() == 1);
  CHECK(empty[0].snapshot().last());
  CHECK(empty[0].snapshot().bridges_size() == 0);

  for (int i = 0; i < 2500; ++i) {
    char id[16];
    snprintf(id, sizeof id, "b%05d", i);
    mirror.attached(makeBridge(id, "t1"));
  }
  mirror.attached(makeBridge("b00000", "t2"));  // replaces, does not add
  CHECK(mirror.detached("b00001"));
  CHECK_FALSE(mirror.detached("b00001"));
  CHECK(mirror.size() == 2499);

  auto parts = mirror.snapshot();
  REQUIRE(parts.size() == 3);
  CHECK(parts[0].snapshot().bridges_size() == 1000);
  CHECK(parts[1].snapshot().bridges_size() == 1000);
  CHECK(parts[2].snapshot().bridges_size() == 499);
  CHECK_FALSE(parts[0].snapshot().last());
  CHECK_FALSE(parts[1].snapshot().last());
  CHECK(parts[2].snapshot().last());
  CHECK(parts[0].snapshot().bridges(0).bridge_id() == "b00000");
  CHECK(parts[0].snapshot().bridges(0).tunnel_id() == "t2");
  CHECK(parts[0].snapshot().bridges(1).bridge_id() == "b00002");
  CHECK(same(parts[2].snapshot().bridges(498), makeBridge("b02499", "t1")));

  auto small = mirror.snapshot(1000000);
  REQUIRE(small.size() == 1);
  CHECK(small[0].snapshot().last());
  CHECK(small[0].snapshot().bridges_size() == 2499);
}

TEST_CASE("control mirror: usage is summed per tunnel and taken once") {
  UsageTally tally;
  CHECK_FALSE(tally.take(1, 2).has_value());
  tally.add("t2", 0, 0, 0, 0);
  CHECK(tally.empty());
  tally.add("t2", 1, 2, 3, 4);
  tally.add("t1", 10, 20, 1, 0);
  tally.add("t2", 100, 200, 300, 400);
  auto taken = tally.take(1000, 2000);
  REQUIRE(taken.has_value());
  const v1::Counters& counters = taken->counters();
  CHECK(counters.interval_start_unix_ms() == 1000);
  CHECK(counters.interval_end_unix_ms() == 2000);
  REQUIRE(counters.tunnels_size() == 2);
  CHECK(counters.tunnels(0).tunnel_id() == "t1");
  CHECK(counters.tunnels(0).bytes_in() == 10);
  CHECK(counters.tunnels(0).bytes_out() == 20);
  CHECK(counters.tunnels(0).connections() == 1);
  CHECK(counters.tunnels(0).rejected_connections() == 0);
  CHECK(counters.tunnels(1).tunnel_id() == "t2");
  CHECK(counters.tunnels(1).bytes_in() == 101);
  CHECK(counters.tunnels(1).bytes_out() == 202);
  CHECK(counters.tunnels(1).connections() == 303);
  CHECK(counters.tunnels(1).rejected_connections() == 404);
  CHECK(tally.empty());
  CHECK_FALSE(tally.take(2000, 3000).has_value());

  tally.add("t1", 5, 0, 0, 0);
  tally.restore(counters);
  auto again = tally.take(2000, 3000);
  REQUIRE(again.has_value());
  REQUIRE(again->counters().tunnels_size() == 2);
  CHECK(again->counters().tunnels(0).bytes_in() == 15);
  CHECK(again->counters().tunnels(1).rejected_connections() == 404);
}

TEST_CASE("control mirror: backoff doubles with jitter up to the maximum and resets") {
  ReconnectBackoff backoff(100, 1000);
  CHECK(backoff.next(1.0) == 100);
  CHECK(backoff.next(0.0) == 100);  // step 200, jitter down to half
  CHECK(backoff.next(1.0) == 400);
  CHECK(backoff.next(0.5) == 600);  // step 800: 400 + 200
  CHECK(backoff.next(1.0) == 1000);
  CHECK(backoff.next(1.0) == 1000);
  CHECK(backoff.step() == 1000);
  backoff.reset();
  CHECK(backoff.next(1.0) == 100);
}

TEST_CASE("control mirror: the writer's messages are packed into RelayBatch in order, bounded") {
  auto ack = [](uint64_t id) {
    v1::RelayMessage message;
    message.mutable_ack()->set_command_id(id);
    return message;
  };
  auto acks = [&](uint64_t count) {
    std::deque<v1::RelayMessage> messages;
    for (uint64_t i = 0; i < count; ++i) messages.push_back(ack(i));
    return messages;
  };
  auto ids = [](const std::vector<v1::RelayMessage>& packed) {
    std::vector<std::vector<uint64_t>> out;
    for (const auto& message : packed) {
      std::vector<uint64_t> group;
      if (message.has_batch()) {
        for (const auto& inner : message.batch().messages())
          group.push_back(inner.ack().command_id());
      } else {
        group.push_back(message.ack().command_id() + 1000);  // a bare message
      }
      out.push_back(group);
    }
    return out;
  };
  using Groups = std::vector<std::vector<uint64_t>>;
  // A controld that does not read batches gets every message alone; one message stays bare.
  CHECK(ids(ot::relayd::packRelayBatches(acks(3), false, 100, 1 << 20)) ==
        Groups{{1000}, {1001}, {1002}});
  CHECK(ids(ot::relayd::packRelayBatches(acks(1), true, 100, 1 << 20)) == Groups{{1000}});
  CHECK(ot::relayd::packRelayBatches(acks(0), true, 100, 1 << 20).empty());
  // In order, at most maxMessages each; a last group of one stays bare.
  CHECK(ids(ot::relayd::packRelayBatches(acks(5), true, 100, 1 << 20)) == Groups{{0, 1, 2, 3, 4}});
  CHECK(ids(ot::relayd::packRelayBatches(acks(5), true, 2, 1 << 20)) ==
        Groups{{0, 1}, {2, 3}, {1004}});
  // And about maxBytes each: a message that alone exceeds it still goes, alone.
  std::deque<v1::RelayMessage> sized = acks(4);
  sized[1].mutable_ack()->set_message(std::string(3000, 'x'));
  CHECK(ids(ot::relayd::packRelayBatches(sized, true, 100, 1000)) ==
        Groups{{1000}, {1001}, {2, 3}});
}

// ---- the client against the fake

TEST_CASE("control client: hello, snapshot, pushes, deltas and acks in order") {
  ControlFixture fx;
  fx.startServer();
  Recorder rec;
  ControlClient client(&fx.loop, fx.options(), rec.callbacks());
  client.bridgeAttached(makeBridge("b1", "t1"));
  client.bridgeAttached(makeBridge("b2", "t2"));
  client.bridgeDetached("b2", "t2", v1::DETACH_REASON_DROP, 5);
  CHECK_FALSE(client.connected());
  client.start();

  REQUIRE(fx.runUntil([&] { return client.connected() && snapshotDone(fx.service.received(0)); }));
  CHECK(rec.states == std::vector<bool>{true});
  auto received = fx.service.received(0);
  REQUIRE(received.size() == 2);
  REQUIRE(received[0].has_hello());
  const v1::Hello& hello = received[0].hello();
  CHECK(hello.machine_id() == "machine-1");
  CHECK(hello.epoch() == 0xfeedbeefcafe);
  CHECK(hello.started_at_unix_ms() == 1'700'000'123'456);
  CHECK(hello.version() == "0.1.0-test");
  CHECK_FALSE(hello.draining());
  REQUIRE(received[1].snapshot().bridges_size() == 1);
  CHECK(same(received[1].snapshot().bridges(0), makeBridge("b1", "t1")));

  // Pushes reach the loop in order, the mesh table's too.
  v1::ControlMessage tunnel;
  tunnel.mutable_tunnel()->set_tunnel_id("t1");
  tunnel.mutable_tunnel()->set_revision(3);
  v1::ControlMessage deleted;
  deleted.mutable_tunnel_deleted()->set_tunnel_id("t2");
  v1::ControlMessage mesh;
  mesh.mutable_mesh_snapshot()->set_version(1);
  v1::ControlMessage meshDelta;
  meshDelta.mutable_mesh_delta()->set_version(2);
  v1::ControlMessage certificate;
  certificate.mutable_api_certificate()->set_fingerprint_sha256("ab12");
  v1::ControlMessage command;
  command.mutable_command()->set_id(7);
  command.mutable_command()->mutable_drain_tunnel()->set_tunnel_id("t1");
  for (auto* message : {&tunnel, &deleted, &mesh, &meshDelta, &certificate, &command}) {
    fx.service.push(*message);
  }
  REQUIRE(fx.runUntil([&] { return rec.events.size() == 6; }));
  CHECK(rec.events == std::vector<std::string>{"tunnel:t1@3", "deleted:t2", "mesh_snapshot:1",
                                               "mesh_delta:2", "cert:ab12", "command:7"});

  // Deltas and an ack, in the order the loop reported them.
  client.bridgeAttached(makeBridge("b3", "t3"));
  client.bridgeDetached("b1", "t1", v1::DETACH_REASON_CLIENT_CLOSE, 1234);
  v1::Ack ack;
  ack.set_command_id(7);
  ack.set_status(v1::ACK_STATUS_OK);
  ack.set_message("drained 1");
  ack.set_bridges_affected(1);
  client.ack(ack);
  client.bridgeAttached(makeBridge("b4", "t1"));
  client.requestMeshSnapshot(2, 4);
  REQUIRE(fx.runUntil([&] { return fx.service.received(0).size() == 7; }));
  received = fx.service.received(0);
  REQUIRE(received[2].has_attached());
  CHECK(same(received[2].attached().bridge(), makeBridge("b3", "t3")));
  REQUIRE(received[3].has_detached());
  CHECK(received[3].detached().bridge_id() == "b1");
  CHECK(received[3].detached().tunnel_id() == "t1");
  CHECK(received[3].detached().reason() == v1::DETACH_REASON_CLIENT_CLOSE);
  CHECK(received[3].detached().detached_at_unix_ms() == 1234);
  REQUIRE(received[4].has_ack());
  CHECK(same(received[4].ack(), ack));
  REQUIRE(received[5].has_attached());
  CHECK(received[5].attached().bridge().bridge_id() == "b4");
  REQUIRE(received[6].has_mesh_snapshot_request());
  CHECK(received[6].mesh_snapshot_request().have_version() == 2);
  CHECK(received[6].mesh_snapshot_request().got_version() == 4);

  // stop() flushes what is queued and half-closes before it returns.
  ack.set_command_id(8);
  client.ack(ack);
  client.stop();
  received = fx.service.received(0);
  REQUIRE(received.size() == 8);
  CHECK(received[7].ack().command_id() == 8);
  CHECK(fx.service.ended(0));
  CHECK(fx.service.streams() == 1);
  client.stop();                                  // idempotent
  client.bridgeAttached(makeBridge("b9", "t9"));  // ignored after stop
  CHECK(rec.states == std::vector<bool>{true});
}

TEST_CASE("control client: a reconnect resyncs with a snapshot of what changed while down") {
  ControlFixture fx;
  fx.startServer();
  Recorder rec;
  ControlClient client(&fx.loop, fx.options(), rec.callbacks());
  client.bridgeAttached(makeBridge("b1", "t1"));
  client.bridgeAttached(makeBridge("b2", "t1"));
  client.start();
  REQUIRE(fx.runUntil([&] { return client.connected() && snapshotDone(fx.service.received(0)); }));
  CHECK(bridgeIds(fx.service.received(0)[1].snapshot()) == std::vector<std::string>{"b1", "b2"});

  fx.service.setRefuse(true);
  fx.service.closeLatest();
  REQUIRE(fx.runUntil([&] { return !client.connected(); }));
  CHECK(rec.states == std::vector<bool>{true, false});

  // While down: folded into the mirror, never queued as deltas.
  client.bridgeAttached(makeBridge("b3", "t2"));
  client.bridgeDetached("b1", "t1", v1::DETACH_REASON_DROP, 1);
  client.bridgeAttached(makeBridge("b4", "t2"));
  client.bridgeDetached("b4", "t2", v1::DETACH_REASON_IDLE_RETIRE, 2);
  client.ack(v1::Ack{});  // dropped: no stream
  REQUIRE(fx.runUntil([&] { return fx.service.refused() >= 2; }));
  CHECK(fx.service.streams() == 1);

  fx.service.setRefuse(false);
  REQUIRE(fx.runUntil([&] {
    return fx.service.streams() == 2 && snapshotDone(fx.service.received(1)) && client.connected();
  }));
  CHECK(rec.states == std::vector<bool>{true, false, true});
  client.bridgeAttached(makeBridge("b5", "t3"));
  REQUIRE(fx.runUntil([&] { return fx.service.received(1).size() >= 3; }));
  auto received = fx.service.received(1);
  REQUIRE(received.size() == 3);
  CHECK(received[0].has_hello());
  CHECK(received[0].hello().epoch() == 0xfeedbeefcafe);
  REQUIRE(received[1].has_snapshot());
  CHECK(received[1].snapshot().last());
  CHECK(bridgeIds(received[1].snapshot()) == std::vector<std::string>{"b2", "b3"});
  REQUIRE(received[2].has_attached());
  CHECK(received[2].attached().bridge().bridge_id() == "b5");
  // The first stream saw nothing of what happened while down.
  CHECK(fx.service.received(0).size() == 2);
}

// The cut between a stream's snapshot and its deltas is made on the loop: while the loop keeps
// attaching and detaching bridges on every iteration (before, during and after each reconnect's
// snapshot), replaying snapshot + deltas on controld's side finds no attach of a bridge it already
// has, no detach of one it does not have, and, at the end, exactly the loop's bridges.
TEST_CASE("control client: the snapshot cut is exact while the loop keeps reporting bridges") {
  ControlFixture fx;
  fx.startServer();
  Recorder rec;
  ControlClient client(&fx.loop, fx.options(), rec.callbacks());
  std::set<std::string> truth;  // what the loop has attached now
  std::deque<std::string> order;
  uint64_t nextId = 0;
  auto attachOne = [&] {
    const std::string id = "c" + std::to_string(nextId++);
    client.bridgeAttached(makeBridge(id, "t1"));
    truth.insert(id);
    order.push_back(id);
  };
  auto detachOldest = [&] {
    const std::string id = order.front();
    order.pop_front();
    client.bridgeDetached(id, "t1", v1::DETACH_REASON_DROP, 1);
    truth.erase(id);
  };
  for (int i = 0; i < 100; ++i) attachOne();
  // One change per loop iteration: unbounded while the client is not connected (they only touch
  // the mirror), then `tail` more once it is (queued: the outbox holds at most 65,536), so changes
  // happen right before, while and right after the loop takes each snapshot.
  bool attachNext = true;
  size_t tail = 0;
  std::function<void()> churn = [&] {
    if (client.connected()) {
      if (tail == 0) return;
      --tail;
    }
    if (attachNext) {
      attachOne();
    } else {
      detachOldest();
    }
    attachNext = !attachNext;
  };
  uv_idle_t idle{};
  REQUIRE(uv_idle_init(&fx.loop, &idle) == 0);
  idle.data = &churn;
  REQUIRE(uv_idle_start(&idle, [](uv_idle_t* handle) {
            (*static_cast<std::function<void()>*>(handle->data))();
          }) == 0);

  constexpr size_t kStreams = 4;
  tail = 2'000;
  client.start();
  for (size_t stream = 0; stream < kStreams; ++stream) {
    REQUIRE(fx.runUntil(
        [&] { return fx.service.streams() == stream + 1 && client.connected() && tail == 0; }));
    if (stream + 1 == kStreams) break;
    fx.service.closeLatest();
    REQUIRE(fx.runUntil([&] { return !client.connected(); }));
    tail = 2'000;
  }
  uv_idle_stop(&idle);
  v1::Ack marker;
  marker.set_command_id(4242);
  client.ack(marker);
  auto markerSeen = [&] {
    const auto messages = fx.service.received(kStreams - 1);
    return !messages.empty() && messages.back().has_ack() &&
           messages.back().ack().command_id() == 4242;
  };
  REQUIRE(fx.runUntil(markerSeen));

  for (size_t stream = 0; stream < kStreams; ++stream) {
    CAPTURE(stream);
    std::set<std::string> replayed;
    size_t doubled = 0;
    size_t missing = 0;
    for (const auto& message : fx.service.received(stream)) {
      if (message.has_snapshot()) {
        for (const auto& bridge : message.snapshot().bridges()) replayed.insert(bridge.bridge_id());
      } else if (message.has_attached()) {
        if (!replayed.insert(message.attached().bridge().bridge_id()).second) ++doubled;
      } else if (message.has_detached()) {
        if (replayed.erase(message.detached().bridge_id()) == 0) ++missing;
      }
    }
    CHECK(doubled == 0);
    CHECK(missing == 0);
    if (stream + 1 == kStreams) CHECK(replayed == truth);
  }
  uv_close(reinterpret_cast<uv_handle_t*>(&idle), nullptr);
  uv_run(&fx.loop, UV_RUN_NOWAIT);
}

TEST_CASE("control client: a large snapshot is sent in parts of 1000 bridges") {
  ControlFixture fx;
  fx.startServer();
  Recorder rec;
  ControlClient client(&fx.loop, fx.options(), rec.callbacks());
  for (int i = 0; i < 1500; ++i) client.bridgeAttached(makeBridge("b" + std::to_string(i), "t1"));
  client.start();
  REQUIRE(fx.runUntil([&] { return client.connected() && snapshotDone(fx.service.received(0)); }));
  auto received = fx.service.received(0);
  REQUIRE(received.size() == 3);
  CHECK(received[1].snapshot().bridges_size() == 1000);
  CHECK_FALSE(received[1].snapshot().last());
  CHECK(received[2].snapshot().bridges_size() == 500);
  CHECK(received[2].snapshot().last());
}

TEST_CASE("control client: usage is summed per tunnel and sent every interval") {
  ControlFixture fx;
  fx.startServer();
  Recorder rec;
  auto options = fx.options();
  options.countersIntervalMs = 30;
  ControlClient client(&fx.loop, options, rec.callbacks());
  // Usage from before the session: kept and sent with the first report.
  client.addUsage("t1", 10, 20, 1, 0);
  client.addUsage("t1", 5, 5, 1, 1);
  client.addUsage("t2", 0, 0, 0, 0);
  client.addUsage("t3", 0, 0, 0, 2);
  const auto before = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  client.start();
  auto counters = [&] {
    std::vector<v1::Counters> out;
    for (const auto& message : fx.service.received(0)) {
      if (message.has_counters()) out.push_back(message.counters());
    }
    return out;
  };
  REQUIRE(fx.runUntil([&] { return counters().size() == 1; }));
  const v1::Counters first = counters()[0];
  CHECK(first.interval_start_unix_ms() >= before);
  CHECK(first.interval_end_unix_ms() >= first.interval_start_unix_ms());
  REQUIRE(first.tunnels_size() == 2);
  CHECK(first.tunnels(0).tunnel_id() == "t1");
  CHECK(first.tunnels(0).bytes_in() == 15);
  CHECK(first.tunnels(0).bytes_out() == 25);
  CHECK(first.tunnels(0).connections() == 2);
  CHECK(first.tunnels(0).rejected_connections() == 1);
  CHECK(first.tunnels(1).tunnel_id() == "t3");
  CHECK(first.tunnels(1).rejected_connections() == 2);

  client.addUsage("t2", 100, 0, 0, 0);
  REQUIRE(fx.runUntil([&] { return counters().size() == 2; }));
  const v1::Counters second = counters()[1];
  // Intervals without usage sent nothing, so this one starts where the first ended.
  CHECK(second.interval_start_unix_ms() == first.interval_end_unix_ms());
  REQUIRE(second.tunnels_size() == 1);
  CHECK(second.tunnels(0).tunnel_id() == "t2");
  CHECK(second.tunnels(0).bytes_in() == 100);
  CHECK(countKind(fx.service.received(0), v1::RelayMessage::kCounters) == 2);
}

TEST_CASE("control client: relayd's figures go out at once, then only when they changed") {
  ControlFixture fx;
  fx.startServer();
  Recorder rec;
  ot::metrics::Metrics registry;
  RelayMetrics metrics(registry);
  metrics.visitorConnectionsOpen.Increment();
  metrics.visitor(ot::relayd::VisitorOutcome::kForwardedOut);
  metrics.meshLookupHit.Increment();
  auto options = fx.options();
  options.statsIntervalMs = 10;
  // The writer thread reads the metrics while this thread bumps them: atomics, as in relayd.
  options.stats = [&metrics] { return ot::relayd::readRelayStats(metrics); };
  ControlClient client(&fx.loop, options, rec.callbacks());
  client.start();
  auto figures = [&] {
    std::vector<v1::Counters> out;
    for (const auto& message : fx.service.received(0)) {
      if (message.has_counters() && message.counters().has_relay())
        out.push_back(message.counters());
    }
    return out;
  };
  REQUIRE(fx.runUntil([&] { return figures().size() == 1; }));
  const v1::Counters first = figures()[0];
  // The figures alone: no usage, no interval (the usage reports keep theirs).
  CHECK(first.tunnels_size() == 0);
  CHECK(first.interval_start_unix_ms() == 0);
  CHECK(first.interval_end_unix_ms() == 0);
  CHECK(first.relay().taken_at_unix_ms() > 0);
  CHECK(first.relay().visitor_connections_open() == 1);
  CHECK(first.relay().visitor_connections().at("forwarded_out") == 1);
  CHECK(first.relay().visitor_connections().at("forwarded_in") == 0);
  CHECK(first.relay().visitor_connections().at("served_local") == 0);
  CHECK(first.relay().forward_failures().at("refused") == 0);
  CHECK(first.relay().forward_failures().size() == 4);
  CHECK(first.relay().mesh_lookups_hit() == 1);
  CHECK(first.relay().mesh_lookups_miss() == 0);

  // Nothing moved: ten intervals pass without another report.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the writer needs no loop
  CHECK(figures().size() == 1);

  metrics.visitor(ot::relayd::VisitorOutcome::kForwardedIn);
  metrics.forwardFailed(ot::relayd::ForwardFailure::kRefused);
  metrics.visitorConnectionsOpen.Decrement();
  REQUIRE(fx.runUntil([&] { return figures().size() == 2; }));
  const v1::RelayStats second = figures()[1].relay();
  CHECK(second.visitor_connections_open() == 0);
  CHECK(second.visitor_connections().at("forwarded_in") == 1);
  CHECK(second.forward_failures().at("refused") == 1);

  // A new stream (a restarted controld knows nothing) gets them again at once.
  fx.service.closeLatest();
  REQUIRE(fx.runUntil([&] {
    for (const auto& message : fx.service.received(1)) {
      if (message.has_counters() && message.counters().has_relay()) return true;
    }
    return false;
  }));
}

TEST_CASE("control client: draining is sent at once and announced in hello on reconnect") {
  ControlFixture fx;
  fx.startServer();
  Recorder rec;
  ControlClient client(&fx.loop, fx.options(), rec.callbacks());
  client.start();
  REQUIRE(fx.runUntil([&] { return client.connected() && snapshotDone(fx.service.received(0)); }));
  client.draining(1'700'000'999'000);
  REQUIRE(fx.runUntil([&] { return fx.service.received(0).size() == 3; }));
  REQUIRE(fx.service.received(0)[2].has_draining());
  CHECK(fx.service.received(0)[2].draining().deadline_unix_ms() == 1'700'000'999'000);

  fx.service.closeLatest();
  REQUIRE(fx.runUntil([&] {
    return fx.service.streams() == 2 && snapshotDone(fx.service.received(1)) && client.connected();
  }));
  auto received = fx.service.received(1);
  REQUIRE(received.size() == 2);
  CHECK(received[0].hello().draining());
  CHECK(rec.states == std::vector<bool>{true, false, true});
}

TEST_CASE("control client: a session is up only once controld answers SessionAccepted") {
  ControlFixture fx;
  v1::ControlMessage record;
  record.mutable_tunnel()->set_tunnel_id("t1");
  fx.service.setGreeting(record);  // a controld that breaks the contract
  fx.startServer();
  Recorder rec;
  auto client = std::make_unique<ControlClient>(&fx.loop, fx.options(), rec.callbacks());
  client->start();
  REQUIRE(fx.runUntil([&] { return fx.service.streams() >= 3; }));  // it keeps retrying
  CHECK_FALSE(client->connected());
  CHECK(rec.states.empty());
  CHECK(rec.events.empty());  // what came instead of SessionAccepted was not delivered

  fx.service.setGreeting(FakeControl::accepted());
  REQUIRE(fx.runUntil([&] { return client->connected(); }));
  CHECK(rec.states == std::vector<bool>{true});
  client.reset();

  // A controld that never answers: stop() cancels at once instead of lingering for a flush.
  fx.service.setGreeting(std::nullopt);
  const size_t before = fx.service.streams();
  client = std::make_unique<ControlClient>(&fx.loop, fx.options(), rec.callbacks());
  client->start();
  REQUIRE(fx.runUntil([&] {
    return fx.service.streams() == before + 1 && snapshotDone(fx.service.received(before));
  }));
  const auto stopping = std::chrono::steady_clock::now();
  client->stop();
  CHECK(std::chrono::steady_clock::now() - stopping < std::chrono::milliseconds(900));
  CHECK(fx.service.streams() == before + 1);
  CHECK(rec.states == std::vector<bool>{true});
}

TEST_CASE("control client: AuthorizeAttach and FetchTunnel round trip on the loop") {
  ControlFixture fx;
  fx.startServer();
  Recorder rec;
  auto options = fx.options();
  options.callTimeoutMs = 300;
  ControlClient client(&fx.loop, options, rec.callbacks());

  v1::AuthorizeAttachRequest request;
  request.set_tunnel_id("t1");
  request.set_token("good");
  request.add_routes("");
  request.add_routes("api");
  request.set_bridge_id("b7");
  request.set_max_conns(32);
  std::vector<Result<v1::AuthorizeAttachResponse>> answers;
  client.authorizeAttach(request,
                         [&](Result<v1::AuthorizeAttachResponse> r) { answers.push_back(r); });
  request.set_token("bad");
  client.authorizeAttach(request,
                         [&](Result<v1::AuthorizeAttachResponse> r) { answers.push_back(r); });
  std::vector<Result<v1::FetchTunnelResponse>> fetched;
  client.fetchTunnel("t1", [&](Result<v1::FetchTunnelResponse> r) { fetched.push_back(r); });
  REQUIRE(fx.runUntil([&] { return answers.size() == 2 && fetched.size() == 1; }));
  client.fetchTunnel("nope", [&](Result<v1::FetchTunnelResponse> r) { fetched.push_back(r); });
  REQUIRE(fx.runUntil([&] { return fetched.size() == 2; }));

  // Each answer is the one for its own request, whatever order they finished in.
  int ok = 0;
  int bad = 0;
  for (const auto& answer : answers) {
    REQUIRE(answer.ok());
    if (answer->result() == v1::ATTACH_RESULT_OK) {
      ++ok;
      CHECK(answer->record().tunnel_id() == "t1");
      CHECK(answer->record().revision() == 4);
    } else {
      ++bad;
      CHECK(answer->result() == v1::ATTACH_RESULT_BAD_TOKEN);
      CHECK(answer->message() == "token does not match");
    }
  }
  CHECK(ok == 1);
  CHECK(bad == 1);
  auto last = fx.service.lastAuthorize();
  REQUIRE(last.has_value());
  CHECK(last->bridge_id() == "b7");
  CHECK(last->routes_size() == 2);
  CHECK(last->max_conns() == 32);

  REQUIRE(fetched[0].ok());
  CHECK(fetched[0]->found());
  CHECK(fetched[0]->record().revision() == 9);
  CHECK(fetched[0]->record().hostname() == "t1.tunnels.test");
  REQUIRE(fetched[1].ok());
  CHECK_FALSE(fetched[1]->found());

  // A controld that does not answer in time: kTimeout after callTimeoutMs.
  request.set_token("slow");
  std::optional<Result<v1::AuthorizeAttachResponse>> slow;
  client.authorizeAttach(request, [&](Result<v1::AuthorizeAttachResponse> r) { slow = r; });
  REQUIRE(fx.runUntil([&] { return slow.has_value(); }));
  REQUIRE_FALSE(slow->ok());
  CHECK(slow->error().kind == ErrorKind::kTimeout);
  CHECK(rec.states.empty());  // never started: no session
}

TEST_CASE("control client: stop cancels calls in flight and drops their callbacks") {
  ControlFixture fx;
  fx.startServer();
  Recorder rec;
  bool called = false;
  {
    ControlClient client(&fx.loop, fx.options(), rec.callbacks());
    v1::AuthorizeAttachRequest request;
    request.set_tunnel_id("t1");
    request.set_token("slow");
    client.authorizeAttach(request, [&](Result<v1::AuthorizeAttachResponse>) { called = true; });
    REQUIRE(fx.runUntil([&] { return fx.service.slowStarted(); }));
  }  // the destructor stops
  REQUIRE(fx.runUntil([&] { return fx.service.slowCancelled(); }));
  for (int i = 0; i < 5; ++i) uv_run(&fx.loop, UV_RUN_NOWAIT);
  CHECK_FALSE(called);
}

TEST_CASE("control client: without controld calls fail fast and the session retries") {
  ControlFixture fx;  // no server yet
  Recorder rec;
  ControlClient client(&fx.loop, fx.options(), rec.callbacks());
  const auto started = std::chrono::steady_clock::now();
  std::optional<Result<v1::AuthorizeAttachResponse>> answer;
  std::optional<Result<v1::FetchTunnelResponse>> fetched;
  client.authorizeAttach(v1::AuthorizeAttachRequest{},
                         [&](Result<v1::AuthorizeAttachResponse> r) { answer = r; });
  client.fetchTunnel("t1", [&](Result<v1::FetchTunnelResponse> r) { fetched = r; });
  REQUIRE(fx.runUntil([&] { return answer.has_value() && fetched.has_value(); }));
  // Well before callTimeoutMs (5 s): the call did not wait for controld to appear.
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::milliseconds(2000));
  REQUIRE_FALSE(answer->ok());
  CHECK(answer->error().kind == ErrorKind::kUnavailable);
  REQUIRE_FALSE(fetched->ok());
  CHECK(fetched->error().kind == ErrorKind::kUnavailable);

  client.bridgeAttached(makeBridge("b1", "t1"));
  client.start();
  // A few rounds of the loop while the attempts fail: nothing is delivered.
  for (int i = 0; i < 3; ++i) uv_run(&fx.loop, UV_RUN_NOWAIT);
  CHECK(rec.states.empty());
  fx.startServer();
  REQUIRE(fx.runUntil([&] { return client.connected() && snapshotDone(fx.service.received(0)); }));
  CHECK(rec.states == std::vector<bool>{true});
  CHECK(bridgeIds(fx.service.received(0)[1].snapshot()) == std::vector<std::string>{"b1"});
}

TEST_CASE(
    "control client: a restarted controld is found at the next attempts, not gRPC's backoff") {
  ControlFixture fx;
  fx.startServer();
  Recorder rec;
  ControlClient client(&fx.loop, fx.options(), rec.callbacks());
  client.start();
  REQUIRE(fx.runUntil([&] { return client.connected(); }));

  // controld gone long enough for gRPC's own reconnect backoff to grow: dozens of our attempts
  // (at most 100 ms apart here) fail while its socket refuses.
  fx.stopServer();
  REQUIRE(fx.runUntil([&] { return !client.connected(); }));
  const uint64_t down = client.sessionAttempts();
  REQUIRE(fx.runUntil([&] { return client.sessionAttempts() >= down + 25; }));

  fx.startServer();
  const uint64_t listening = client.sessionAttempts();
  REQUIRE(fx.runUntil([&] { return client.connected(); }));
  // gRPC 1.51 on its own took 3.4-5 s here (dozens of attempts); each attempt now resets its
  // backoff and waits for that connect, so one attempt finds it (three allow for a loaded box).
  CHECK(client.sessionAttempts() - listening <= 3);
  CHECK(rec.states == std::vector<bool>{true, false, true});
}

// ---- attach authorization carried by the session

namespace {

v1::ControlMessage acceptedWithAuthorization() {
  v1::ControlMessage message = FakeControl::accepted();
  message.mutable_accepted()->set_authorize_on_session(true);
  return message;
}

// The AuthorizeItems the fake received on stream `stream`, in order.
std::vector<v1::AuthorizeItem> authorizeItems(FakeControl& service, size_t stream) {
  std::vector<v1::AuthorizeItem> items;
  for (const auto& message : service.received(stream)) {
    if (!message.has_authorize()) continue;
    for (const auto& item : message.authorize().requests()) items.push_back(item);
  }
  return items;
}

v1::AuthorizeAnswer answerFor(const v1::AuthorizeItem& item) {
  v1::AuthorizeAnswer answer;
  answer.set_request_id(item.request_id());
  if (item.request().token() == "good") {
    answer.mutable_response()->set_result(v1::ATTACH_RESULT_OK);
    answer.mutable_response()->mutable_record()->set_tunnel_id(item.request().tunnel_id());
  } else {
    answer.mutable_response()->set_result(v1::ATTACH_RESULT_BAD_TOKEN);
    answer.mutable_response()->set_message("token of " + item.request().bridge_id());
  }
  return answer;
}

v1::AuthorizeAttachRequest numberedRequest(size_t i) {
  v1::AuthorizeAttachRequest request;
  request.set_tunnel_id("t" + std::to_string(i % 7));
  request.set_token(i % 3 == 0 ? "good" : "bad");
  request.add_routes("");
  request.set_bridge_id("b" + std::to_string(i));
  request.set_max_conns(static_cast<uint32_t>(i));
  return request;
}

}  // namespace

TEST_CASE("control client: attaches are authorized on the session, batched, answers matched") {
  ControlFixture fx;
  fx.service.setGreeting(acceptedWithAuthorization());
  fx.startServer();
  Recorder rec;
  ControlClient client(&fx.loop, fx.options(), rec.callbacks());
  client.start();
  REQUIRE(fx.runUntil([&] { return client.connected(); }));

  // A burst in one loop step: the writer takes what queued while it was busy as one batch.
  constexpr size_t kRequests = 200;
  std::vector<std::optional<Result<v1::AuthorizeAttachResponse>>> answers(kRequests);
  for (size_t i = 0; i < kRequests; ++i) {
    client.authorizeAttach(
        numberedRequest(i),
        [&answers, i](Result<v1::AuthorizeAttachResponse> r) { answers[i] = r; });
  }
  REQUIRE(fx.runUntil([&] { return authorizeItems(fx.service, 0).size() == kRequests; }));
  const std::vector<v1::AuthorizeItem> items = authorizeItems(fx.service, 0);
  const size_t batches = countKind(fx.service.received(0), v1::RelayMessage::kAuthorize);
  MESSAGE("authorization batches for ", kRequests, " requests: ", batches);
  CHECK(batches < kRequests);
  std::set<uint64_t> ids;
  for (size_t i = 0; i < kRequests; ++i) {
    CHECK(same(items[i].request(), numberedRequest(i)));  // in order, whole
    ids.insert(items[i].request_id());
  }
  CHECK(ids.size() == kRequests);
  CHECK_FALSE(fx.service.lastAuthorize().has_value());  // no unary call

  // Answered out of order: the last one alone, the rest in one message in reverse.
  v1::ControlMessage last;
  *last.mutable_authorized()->add_answers() = answerFor(items.back());
  fx.service.push(last);
  v1::ControlMessage rest;
  for (size_t i = kRequests - 1; i-- > 0;)
    *rest.mutable_authorized()->add_answers() = answerFor(items[i]);
  // An answer nobody waits for (unknown ID) is ignored.
  rest.mutable_authorized()->add_answers()->set_request_id(999'999);
  fx.service.push(rest);
  REQUIRE(fx.runUntil([&] {
    for (const auto& answer : answers) {
      if (!answer) return false;
    }
    return true;
  }));
  for (size_t i = 0; i < kRequests; ++i) {
    CAPTURE(i);
    REQUIRE(answers[i]->ok());
    if (i % 3 == 0) {
      CHECK((*answers[i])->result() == v1::ATTACH_RESULT_OK);
      CHECK((*answers[i])->record().tunnel_id() == "t" + std::to_string(i % 7));
    } else {
      CHECK((*answers[i])->result() == v1::ATTACH_RESULT_BAD_TOKEN);
      CHECK((*answers[i])->message() == "token of b" + std::to_string(i));
    }
  }
}

TEST_CASE(
    "control client: bridge deltas wait on the loop, not in the writer, and go out with the next "
    "request") {
  ControlFixture fx;
  fx.service.setGreeting(acceptedWithAuthorization());
  fx.startServer();
  Recorder rec;
  ControlClient client(&fx.loop, fx.options(), rec.callbacks());
  client.start();
  REQUIRE(fx.runUntil([&] { return client.connected() && snapshotDone(fx.service.received(0)); }));
  const size_t base = fx.service.received(0).size();  // Hello and the snapshot

  // A delta alone wakes no thread: while the loop does not run (a busy loop step), it stays
  // there, however long past the 10 ms linger.
  client.bridgeAttached(makeBridge("b1", "t1"));
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  CHECK(fx.service.received(0).size() == base);

  // The next request takes it along, in the order reported, in the same writer pass.
  std::optional<Result<v1::AuthorizeAttachResponse>> answer;
  client.authorizeAttach(numberedRequest(1),
                         [&](Result<v1::AuthorizeAttachResponse> r) { answer = r; });
  REQUIRE(fx.runUntil([&] { return fx.service.received(0).size() == base + 2; }));
  auto received = fx.service.received(0);
  REQUIRE(received[base].has_attached());
  CHECK(received[base].attached().bridge().bridge_id() == "b1");
  REQUIRE(received[base + 1].has_authorize());
  CHECK(received[base + 1].authorize().requests_size() == 1);

  // With nothing to ride with, the loop's linger timer sends it.
  client.bridgeDetached("b1", "t1", v1::DETACH_REASON_CLIENT_CLOSE, 77);
  REQUIRE(fx.runUntil([&] { return fx.service.received(0).size() == base + 3; }));
  received = fx.service.received(0);
  REQUIRE(received[base + 2].has_detached());
  CHECK(received[base + 2].detached().detached_at_unix_ms() == 77);

  // A reconnect's snapshot already holds a delta still waiting: it is not sent again.
  client.bridgeAttached(makeBridge("b2", "t2"));
  fx.service.closeLatest();
  REQUIRE(fx.runUntil([&] { return fx.service.streams() == 2 && client.connected(); }));
  client.ack(v1::Ack());
  REQUIRE(
      fx.runUntil([&] { return countKind(fx.service.received(1), v1::RelayMessage::kAck) == 1; }));
  received = fx.service.received(1);
  CHECK(countKind(received, v1::RelayMessage::kAttached) == 0);
  REQUIRE(received[1].has_snapshot());
  CHECK(bridgeIds(received[1].snapshot()) == std::vector<std::string>{"b2"});
}

TEST_CASE("control client: with a controld that reads batches, one writer pass is one message") {
  ControlFixture fx;
  v1::ControlMessage greeting = acceptedWithAuthorization();
  greeting.mutable_accepted()->set_accepts_batches(true);
  fx.service.setGreeting(greeting);
  fx.startServer();
  Recorder rec;
  ControlClient client(&fx.loop, fx.options(), rec.callbacks());
  client.start();
  REQUIRE(fx.runUntil([&] { return client.connected() && snapshotDone(fx.service.received(0)); }));
  const size_t base = fx.service.received(0).size();

  // In one loop step: two deltas, a request, an ack. The writer may wake for the deltas before the
  // rest is queued, so they take one or two passes: each pass one RelayBatch, in the order
  // reported.
  client.bridgeAttached(makeBridge("b1", "t1"));
  client.bridgeDetached("b0", "t1", v1::DETACH_REASON_DROP, 5);
  std::optional<Result<v1::AuthorizeAttachResponse>> answer;
  client.authorizeAttach(numberedRequest(4),
                         [&](Result<v1::AuthorizeAttachResponse> r) { answer = r; });
  v1::Ack ack;
  ack.set_command_id(11);
  client.ack(ack);
  std::vector<v1::RelayMessage> inner;
  size_t streamMessages = 0;
  REQUIRE(fx.runUntil([&] {
    const auto received = fx.service.received(0);
    inner.clear();
    streamMessages = received.size() - base;
    for (size_t i = base; i < received.size(); ++i) {
      if (!received[i].has_batch()) {
        inner.push_back(received[i]);
        continue;
      }
      for (const auto& message : received[i].batch().messages()) inner.push_back(message);
    }
    return inner.size() == 4;
  }));
  CHECK(streamMessages <= 2);  // the deltas were released together: never four writes
  CHECK(inner[0].attached().bridge().bridge_id() == "b1");
  CHECK(inner[1].detached().bridge_id() == "b0");
  REQUIRE(inner[2].authorize().requests_size() == 1);
  CHECK(same(inner[2].authorize().requests(0).request(), numberedRequest(4)));
  CHECK(inner[3].ack().command_id() == 11);

  // The answer comes back as before; a lone delta later is sent bare.
  v1::ControlMessage answerMessage;
  *answerMessage.mutable_authorized()->add_answers() = answerFor(inner[2].authorize().requests(0));
  fx.service.push(answerMessage);
  REQUIRE(fx.runUntil([&] { return answer.has_value(); }));
  CHECK(answer->ok());
  client.bridgeDetached("b1", "t1", v1::DETACH_REASON_CLIENT_CLOSE, 6);
  REQUIRE(fx.runUntil([&] { return fx.service.received(0).size() == base + streamMessages + 1; }));
  CHECK(fx.service.received(0).back().has_detached());
}

TEST_CASE(
    "control client: a session-carried authorization ends at its deadline; a late answer is "
    "dropped") {
  ControlFixture fx;
  fx.service.setGreeting(acceptedWithAuthorization());
  fx.startServer();
  Recorder rec;
  auto options = fx.options();
  options.callTimeoutMs = 300;
  ControlClient client(&fx.loop, options, rec.callbacks());
  client.start();
  REQUIRE(fx.runUntil([&] { return client.connected(); }));

  const auto started = std::chrono::steady_clock::now();
  int calls = 0;
  std::optional<Result<v1::AuthorizeAttachResponse>> answer;
  client.authorizeAttach(numberedRequest(3), [&](Result<v1::AuthorizeAttachResponse> r) {
    ++calls;
    answer = r;
  });
  REQUIRE(fx.runUntil([&] { return answer.has_value(); }));
  CHECK(std::chrono::steady_clock::now() - started >= std::chrono::milliseconds(290));
  REQUIRE_FALSE(answer->ok());
  CHECK(answer->error().kind == ErrorKind::kTimeout);

  // The answer comes after all: nobody is called twice. A request after it is answered.
  const std::vector<v1::AuthorizeItem> items = authorizeItems(fx.service, 0);
  REQUIRE(items.size() == 1);
  v1::ControlMessage late;
  *late.mutable_authorized()->add_answers() = answerFor(items[0]);
  fx.service.push(late);
  std::optional<Result<v1::AuthorizeAttachResponse>> next;
  client.authorizeAttach(numberedRequest(6),
                         [&](Result<v1::AuthorizeAttachResponse> r) { next = r; });
  REQUIRE(fx.runUntil([&] { return authorizeItems(fx.service, 0).size() == 2; }));
  v1::ControlMessage second;
  *second.mutable_authorized()->add_answers() = answerFor(authorizeItems(fx.service, 0)[1]);
  fx.service.push(second);
  REQUIRE(fx.runUntil([&] { return next.has_value(); }));
  REQUIRE(next->ok());
  CHECK((*next)->result() == v1::ATTACH_RESULT_OK);
  CHECK(calls == 1);
}

TEST_CASE("control client: a stream that ends fails its pending authorizations at once") {
  ControlFixture fx;
  fx.service.setGreeting(acceptedWithAuthorization());
  fx.startServer();
  Recorder rec;
  ControlClient client(&fx.loop, fx.options(), rec.callbacks());  // callTimeoutMs 5 s
  client.start();
  REQUIRE(fx.runUntil([&] { return client.connected(); }));

  std::vector<Result<v1::AuthorizeAttachResponse>> answers;
  for (size_t i = 0; i < 3; ++i) {
    client.authorizeAttach(numberedRequest(i),
                           [&](Result<v1::AuthorizeAttachResponse> r) { answers.push_back(r); });
  }
  REQUIRE(fx.runUntil([&] { return authorizeItems(fx.service, 0).size() == 3; }));
  // The next stream's controld does not offer it (an older one): the unary call is made then.
  fx.service.setGreeting(FakeControl::accepted());
  const auto broken = std::chrono::steady_clock::now();
  fx.service.closeLatest();
  REQUIRE(fx.runUntil([&] { return answers.size() == 3; }));
  // Long before the 5 s deadline: the attaches are decided from the cache now.
  CHECK(std::chrono::steady_clock::now() - broken < std::chrono::milliseconds(2000));
  for (const auto& answer : answers) {
    REQUIRE_FALSE(answer.ok());
    CHECK(answer.error().kind == ErrorKind::kUnavailable);
  }

  REQUIRE(fx.runUntil([&] { return fx.service.streams() == 2 && client.connected(); }));
  std::optional<Result<v1::AuthorizeAttachResponse>> unary;
  client.authorizeAttach(numberedRequest(9),
                         [&](Result<v1::AuthorizeAttachResponse> r) { unary = r; });
  REQUIRE(fx.runUntil([&] { return unary.has_value(); }));
  REQUIRE(unary->ok());
  CHECK((*unary)->result() == v1::ATTACH_RESULT_OK);
  REQUIRE(fx.service.lastAuthorize().has_value());
  CHECK(fx.service.lastAuthorize()->bridge_id() == "b9");
  CHECK(authorizeItems(fx.service, 1).empty());
}

namespace {

// A real Relay on the fixture's loop; stopped and its handles closed however the case ends.
struct RelayRig {
  ControlFixture& fx;
  RelayContext context;
  Relay relay;
  RelayRig(ControlFixture& f, const RelaydConfig& c, RelayMetrics& m)
      : fx(f), context(&f.loop, c, m), relay(context, f.options()) {}
  ~RelayRig() {
    relay.stop();
    context.closeHandles();
    for (int i = 0; i < 100; ++i) uv_run(&fx.loop, UV_RUN_NOWAIT);
  }
};

// The fixture's controld serving, and what a Relay on its loop needs: metrics and a config.
struct RelayCase {
  ControlFixture fx;
  ot::metrics::Metrics registry;
  RelayMetrics metrics{registry};
  RelaydConfig config;
  RelayCase() { fx.startServer(); }
};

}  // namespace

TEST_CASE("relay: the mesh table from controld; a gap asks for a snapshot, the copy serves on") {
  RelayCase rc;
  ControlFixture& fx = rc.fx;
  RelayMetrics& metrics = rc.metrics;
  {
    RelayRig rig(fx, rc.config, metrics);
    Relay& relay = rig.relay;
    relay.start();
    REQUIRE(fx.runUntil([&] { return snapshotDone(fx.service.received(0)); }));

    v1::ControlMessage snapshot;
    snapshot.mutable_mesh_snapshot()->set_version(5);
    snapshot.mutable_mesh_snapshot()->set_last(true);
    auto* peer = snapshot.mutable_mesh_snapshot()->add_peers();
    peer->set_machine_id("A");
    peer->set_internal_address("127.0.0.11:9000");
    peer->set_linked(true);
    auto* holder = snapshot.mutable_mesh_snapshot()->add_holders();
    holder->set_tunnel_id("t1");
    holder->set_machine_id("A");
    holder->set_attached_at_unix_ms(100);
    fx.service.push(snapshot);
    REQUIRE(fx.runUntil([&] { return relay.meshRoutes().version() == 5; }));
    CHECK(metrics.meshTableSnapshots.Value() == 1);
    CHECK(metrics.meshTableRoutes.Value() == 1);

    // Version 7 after 5: a gap. relayd asks for a snapshot once and forwards by its copy.
    v1::ControlMessage skipped;
    skipped.mutable_mesh_delta()->set_version(7);
    *skipped.mutable_mesh_delta()->add_removed() = *holder;
    fx.service.push(skipped);
    v1::ControlMessage later;
    later.mutable_mesh_delta()->set_version(8);
    fx.service.push(later);
    auto asked = [&] {
      return countKind(fx.service.received(0), v1::RelayMessage::kMeshSnapshotRequest);
    };
    REQUIRE(fx.runUntil([&] { return asked() == 1; }));
    REQUIRE(fx.runUntil([&] { return metrics.meshTableGaps.Value() == 1; }));
    for (const auto& message : fx.service.received(0)) {
      if (!message.has_mesh_snapshot_request()) continue;
      CHECK(message.mesh_snapshot_request().have_version() == 5);
      CHECK(message.mesh_snapshot_request().got_version() == 7);
    }
    CHECK(relay.meshRoutes().version() == 5);
    CHECK(relay.meshRoutes().pick("t1", "").has_value());
    CHECK(metrics.meshTableDeltas.Value() == 0);

    // The snapshot it asked for replaces the copy; deltas follow on from it.
    snapshot.mutable_mesh_snapshot()->set_version(8);
    snapshot.mutable_mesh_snapshot()->clear_holders();
    fx.service.push(snapshot);
    v1::ControlMessage next;
    next.mutable_mesh_delta()->set_version(9);
    fx.service.push(next);
    REQUIRE(fx.runUntil([&] { return relay.meshRoutes().version() == 9; }));
    CHECK_FALSE(relay.meshRoutes().pick("t1", "").has_value());
    CHECK(metrics.meshTableSnapshots.Value() == 2);
    CHECK(metrics.meshTableDeltas.Value() == 1);
    CHECK(asked() == 1);

    // controld goes away: the copy stays.
    fx.stopServer();
    REQUIRE(fx.runUntil([&] { return !relay.controlConnected(); }));
    CHECK(relay.meshRoutes().version() == 9);
  }
}

TEST_CASE(
    "relay: RecheckRecords drops cached misses and not-ready records, re-reading served ones") {
  RelayCase rc;
  ControlFixture& fx = rc.fx;
  RelayMetrics& metrics = rc.metrics;
  {
    RelayRig rig(fx, rc.config, metrics);
    Relay& relay = rig.relay;
    relay.start();
    REQUIRE(fx.runUntil([&] { return relay.controlConnected(); }));
    ot::relayd::TunnelTable& table = relay.table();
    v1::ControlMessage pending;
    pending.mutable_tunnel()->set_tunnel_id("pending");
    pending.mutable_tunnel()->set_revision(1);
    fx.service.push(pending);  // certificate not ready, no bridge here
    v1::ControlMessage served = pending;
    served.mutable_tunnel()->set_tunnel_id("t1");  // the fake's FetchTunnel has it at revision 9
    fx.service.push(served);
    REQUIRE(fx.runUntil([&] { return table.record("t1") != nullptr; }));
    REQUIRE(table.record("pending") != nullptr);
    table.addBridge("t1", 99, {""}, 4);  // as a bridge attached here
    table.markMissing("ghost", rig.context.nowMs(), 60'000);

    v1::ControlMessage recheck;
    recheck.mutable_recheck_records()->set_peer_machine_id("machine-a");
    fx.service.push(recheck);
    REQUIRE(fx.runUntil([&] { return !table.knownMissing("ghost", rig.context.nowMs()); }));
    CHECK(table.record("pending") == nullptr);  // read afresh on its next use
    // The served one is read again at once (FetchTunnel), and the answer replaces it.
    REQUIRE(fx.runUntil([&] {
      const ot::relayd::CachedRecord* record = table.record("t1");
      return record != nullptr && record->revision == 9;
    }));
    table.removeBridge("t1", 99);
  }
}

TEST_CASE("relay: upgrades of one tunnel share the FetchTunnel in flight, then the cache") {
  using Decision = ot::relayd::Relay::UpgradeDecision;
  RelayCase rc;
  ControlFixture& fx = rc.fx;
  RelayRig rig(fx, rc.config, rc.metrics);
  Relay& relay = rig.relay;
  relay.start();
  REQUIRE(fx.runUntil([&] { return relay.controlConnected(); }));
  // A storm's bridges of one tunnel, all before its record is cached: the first sends the
  // fetch, which cannot be answered before the loop runs again, so the others join it.
  std::vector<Decision> known;
  std::vector<Decision> unknown;
  for (int i = 0; i < 5; ++i) relay.checkUpgrade("t1", [&](Decision d) { known.push_back(d); });
  for (int i = 0; i < 3; ++i) relay.checkUpgrade("nope", [&](Decision d) { unknown.push_back(d); });
  REQUIRE(fx.runUntil([&] { return known.size() == 5 && unknown.size() == 3; }));
  CHECK(fx.service.fetches("t1") == 1);
  CHECK(fx.service.fetches("nope") == 1);
  CHECK(known == std::vector<Decision>(5, Decision::kAllowed));
  CHECK(unknown == std::vector<Decision>(3, Decision::kNotFound));
  CHECK(rc.metrics.recordFetchesSent.Value() == 2);
  CHECK(rc.metrics.recordFetchesJoined.Value() == 6);

  // Answered from the cache now, at once and without a call.
  std::optional<Decision> again;
  relay.checkUpgrade("t1", [&](Decision d) { again = d; });
  CHECK(again == Decision::kAllowed);
  relay.checkUpgrade("nope", [&](Decision d) { again = d; });
  CHECK(again == Decision::kNotFound);
  CHECK(fx.service.fetches("t1") == 1);
  CHECK(fx.service.fetches("nope") == 1);

  // A waiter whose answer starts another upgrade of the same tunnel (a fetch still to come):
  // that one is a fetch of its own, not lost in the finished one's list.
  std::vector<Decision> chained;
  relay.checkUpgrade("ghost", [&](Decision d) {
    chained.push_back(d);
    (void)relay.table().recheckNegative();  // forgets the "not found" just cached
    relay.checkUpgrade("ghost", [&](Decision next) { chained.push_back(next); });
  });
  REQUIRE(fx.runUntil([&] { return chained.size() == 2; }));
  CHECK(chained == std::vector<Decision>(2, Decision::kNotFound));
  CHECK(fx.service.fetches("ghost") == 2);
}
