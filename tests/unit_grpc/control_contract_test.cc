// The proto contracts in use: a real in-process gRPC server on a unix socket with a small
// RelayControl implementation (below), grpc++'s default health service and server reflection,
// and clients that speak to it the way relayd, otctl, grpcurl and health probes do.
#include <doctest/doctest.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "opentunnel/admin/v1/admin.grpc.pb.h"
#include "opentunnel/control/v1/control.grpc.pb.h"
#include "proto/descriptors.h"
#include "tests/unit_grpc/reflection_client.h"

namespace {

namespace cv1 = opentunnel::control::v1;
namespace hv1 = grpc::health::v1;

constexpr std::string_view kTunnelId = "k3x9tq";
constexpr std::string_view kToken = "tok-2f8c1d7e";
constexpr std::string_view kInstanceId = "controld-test";
constexpr std::uint64_t kCloseCommandId = 7;

// A deadline for every call, so a broken server fails the test instead of hanging it.
std::chrono::system_clock::time_point soon() {
  return std::chrono::system_clock::now() + std::chrono::seconds(10);
}

std::string sha256(std::string_view data) {
  std::string digest(32, '\0');
  unsigned int size = 0;
  const int ok =
      EVP_Digest(data.data(), data.size(), reinterpret_cast<unsigned char*>(digest.data()), &size,
                 EVP_sha256(), nullptr);
  REQUIRE(ok == 1);
  REQUIRE(size == 32);
  return digest;
}

cv1::TunnelRecord testRecord() {
  cv1::TunnelRecord record;
  record.set_tunnel_id(std::string(kTunnelId));
  record.set_revision(42);
  record.set_token_sha256(sha256(kToken));
  record.set_hostname(std::string(kTunnelId) + ".tunnels.test");
  record.set_certificate_state(cv1::CERTIFICATE_STATE_READY);
  record.set_cert_ready(true);
  record.set_max_conns_per_bridge(256);
  return record;
}

cv1::Bridge makeBridge(std::string_view id, std::vector<std::string> routes) {
  cv1::Bridge bridge;
  bridge.set_bridge_id(std::string(id));
  bridge.set_tunnel_id(std::string(kTunnelId));
  for (auto& route : routes) bridge.add_routes(std::move(route));
  bridge.set_origin("laptop");
  bridge.set_profile("wss-443");
  bridge.set_max_conns(128);
  bridge.set_attached_at_unix_ms(1'700'000'000'000);
  bridge.set_peer_address("[2001:db8::7]:50123");
  return bridge;
}

// What controld would do, reduced to what the contract needs: accept the session, push the record,
// answer the snapshot with a command, remember what relayd reported, authorize by token hash.
class TestRelayControl final : public cv1::RelayControl::Service {
 public:
  struct Seen {
    cv1::Hello hello;
    std::vector<cv1::Bridge> bridges;
    bool snapshotComplete = false;
    std::vector<cv1::Ack> acks;
    std::vector<cv1::BridgeDetached> detached;
  };

  [[nodiscard]] Seen seen() const {
    const std::lock_guard lock(mutex_);
    return seen_;
  }

  grpc::Status Session(
      grpc::ServerContext* /*context*/,
      grpc::ServerReaderWriter<cv1::ControlMessage, cv1::RelayMessage>* stream) override {
    cv1::RelayMessage in;
    while (stream->Read(&in)) {
      switch (in.kind_case()) {
        case cv1::RelayMessage::kHello: {
          record([&](Seen& s) { s.hello = in.hello(); });
          cv1::ControlMessage accepted;
          accepted.mutable_accepted()->set_instance_id(std::string(kInstanceId));
          accepted.mutable_accepted()->set_server_time_unix_ms(1'700'000'000'500);
          cv1::ControlMessage upsert;
          *upsert.mutable_tunnel() = testRecord();
          if (!stream->Write(accepted) || !stream->Write(upsert)) return grpc::Status::CANCELLED;
          break;
        }
        case cv1::RelayMessage::kSnapshot: {
          const bool last = in.snapshot().last();
          std::string firstBridge;
          record([&](Seen& s) {
            s.bridges.insert(s.bridges.end(), in.snapshot().bridges().begin(),
                             in.snapshot().bridges().end());
            s.snapshotComplete = last;
            if (!s.bridges.empty()) firstBridge = s.bridges.front().bridge_id();
          });
          if (last && !firstBridge.empty()) {
            cv1::ControlMessage command;
            command.mutable_command()->set_id(kCloseCommandId);
            command.mutable_command()->mutable_close_bridge()->set_bridge_id(firstBridge);
            command.mutable_command()->mutable_close_bridge()->set_reason(
                cv1::DETACH_REASON_SERVER_CLOSE);
            if (!stream->Write(command)) return grpc::Status::CANCELLED;
          }
          break;
        }
        case cv1::RelayMessage::kAck:
          record([&](Seen& s) { s.acks.push_back(in.ack()); });
          break;
        case cv1::RelayMessage::kDetached:
          record([&](Seen& s) { s.detached.push_back(in.detached()); });
          break;
        default:
          return {grpc::StatusCode::INVALID_ARGUMENT, "unexpected message in this test"};
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status AuthorizeAttach(grpc::ServerContext* /*context*/,
                               const cv1::AuthorizeAttachRequest* request,
                               cv1::AuthorizeAttachResponse* response) override {
    const cv1::TunnelRecord record = testRecord();
    const std::string presented = sha256(request->token());
    if (request->tunnel_id() != record.tunnel_id() ||
        CRYPTO_memcmp(presented.data(), record.token_sha256().data(), presented.size()) != 0) {
      response->set_result(cv1::ATTACH_RESULT_BAD_TOKEN);
      response->set_message("the token does not match the tunnel");
      return grpc::Status::OK;
    }
    response->set_result(cv1::ATTACH_RESULT_OK);
    *response->mutable_record() = record;
    return grpc::Status::OK;
  }

  grpc::Status FetchTunnel(grpc::ServerContext* /*context*/, const cv1::FetchTunnelRequest* request,
                           cv1::FetchTunnelResponse* response) override {
    if (request->tunnel_id() == kTunnelId) {
      response->set_found(true);
      *response->mutable_record() = testRecord();
    }
    return grpc::Status::OK;
  }

 private:
  template <typename F>
  void record(F&& update) {
    const std::lock_guard lock(mutex_);
    update(seen_);
  }

  mutable std::mutex mutex_;
  Seen seen_;
};

// A fresh directory for the socket, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ot-grpc-XXXXXX").string();
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

// The server as controld builds it: our services, the default health service, reflection.
// Members are destroyed in reverse order: the server stops before the services and the directory.
class TestServer {
 public:
  TestServer() : target_("unix:" + (dir_.path() / "control.sock").string()) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    builder.AddListeningPort(target_, grpc::InsecureServerCredentials());
    builder.RegisterService(&control_);
    builder.RegisterService(&admin_);
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
    REQUIRE(server_->GetHealthCheckService() != nullptr);
    server_->GetHealthCheckService()->SetServingStatus(
        std::string(cv1::RelayControl::service_full_name()), true);
  }

  [[nodiscard]] std::shared_ptr<grpc::Channel> connect() const {
    auto channel = grpc::CreateChannel(target_, grpc::InsecureChannelCredentials());
    REQUIRE(channel->WaitForConnected(soon()));
    return channel;
  }

  [[nodiscard]] const TestRelayControl& control() const { return control_; }

 private:
  TempDir dir_;
  std::string target_;
  TestRelayControl control_;
  // Every method answers UNIMPLEMENTED; registered so reflection and otctl see the service.
  opentunnel::admin::v1::Admin::Service admin_;
  std::unique_ptr<grpc::Server> server_;
};

bool contains(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST_CASE("Session: hello, snapshot in parts, record push, command and ack, detach") {
  TestServer server;
  auto stub = cv1::RelayControl::NewStub(server.connect());
  grpc::ClientContext context;
  context.set_deadline(soon());
  auto stream = stub->Session(&context);

  cv1::RelayMessage hello;
  hello.mutable_hello()->set_machine_id("machine-a");
  hello.mutable_hello()->set_epoch(0x9e3779b97f4a7c15);
  hello.mutable_hello()->set_started_at_unix_ms(1'700'000'000'000);
  hello.mutable_hello()->set_version("0.1.0");
  hello.mutable_hello()->set_forward_address("10.0.0.1:9000");
  REQUIRE(stream->Write(hello));

  cv1::ControlMessage in;
  REQUIRE(stream->Read(&in));
  REQUIRE(in.kind_case() == cv1::ControlMessage::kAccepted);
  CHECK(in.accepted().instance_id() == kInstanceId);
  CHECK(in.accepted().server_time_unix_ms() == 1'700'000'000'500);
  REQUIRE(stream->Read(&in));
  REQUIRE(in.kind_case() == cv1::ControlMessage::kTunnel);
  CHECK(in.tunnel().tunnel_id() == kTunnelId);
  CHECK(in.tunnel().revision() == 42);
  CHECK(in.tunnel().token_sha256() == sha256(kToken));
  CHECK(in.tunnel().cert_ready());

  cv1::RelayMessage part;
  *part.mutable_snapshot()->add_bridges() = makeBridge("b1", {"", "api"});
  *part.mutable_snapshot()->add_bridges() = makeBridge("b2", {"web"});
  REQUIRE(stream->Write(part));
  part.Clear();
  *part.mutable_snapshot()->add_bridges() = makeBridge("b3", {"db"});
  part.mutable_snapshot()->set_last(true);
  REQUIRE(stream->Write(part));

  REQUIRE(stream->Read(&in));
  REQUIRE(in.kind_case() == cv1::ControlMessage::kCommand);
  CHECK(in.command().id() == kCloseCommandId);
  REQUIRE(in.command().action_case() == cv1::Command::kCloseBridge);
  CHECK(in.command().close_bridge().bridge_id() == "b1");
  CHECK(in.command().close_bridge().reason() == cv1::DETACH_REASON_SERVER_CLOSE);

  cv1::RelayMessage ack;
  ack.mutable_ack()->set_command_id(in.command().id());
  ack.mutable_ack()->set_status(cv1::ACK_STATUS_OK);
  ack.mutable_ack()->set_bridges_affected(1);
  REQUIRE(stream->Write(ack));
  cv1::RelayMessage detached;
  detached.mutable_detached()->set_bridge_id("b1");
  detached.mutable_detached()->set_tunnel_id(std::string(kTunnelId));
  detached.mutable_detached()->set_reason(cv1::DETACH_REASON_SERVER_CLOSE);
  REQUIRE(stream->Write(detached));
  REQUIRE(stream->WritesDone());
  CHECK_FALSE(stream->Read(&in));  // the server ends the stream once relayd closed its side
  const grpc::Status status = stream->Finish();
  REQUIRE_MESSAGE(status.ok(), status.error_message());

  const auto seen = server.control().seen();
  CHECK(seen.hello.machine_id() == "machine-a");
  CHECK(seen.hello.epoch() == 0x9e3779b97f4a7c15);
  CHECK(seen.hello.forward_address() == "10.0.0.1:9000");
  CHECK(seen.snapshotComplete);
  REQUIRE(seen.bridges.size() == 3);
  CHECK(seen.bridges[0].bridge_id() == "b1");
  REQUIRE(seen.bridges[0].routes_size() == 2);
  CHECK(seen.bridges[0].routes(0).empty());
  CHECK(seen.bridges[0].routes(1) == "api");
  CHECK(seen.bridges[0].peer_address() == "[2001:db8::7]:50123");
  CHECK(seen.bridges[2].bridge_id() == "b3");
  REQUIRE(seen.acks.size() == 1);
  CHECK(seen.acks[0].command_id() == kCloseCommandId);
  CHECK(seen.acks[0].status() == cv1::ACK_STATUS_OK);
  REQUIRE(seen.detached.size() == 1);
  CHECK(seen.detached[0].reason() == cv1::DETACH_REASON_SERVER_CLOSE);
}

TEST_CASE("AuthorizeAttach: the tunnel token is OK with the record, anything else BAD_TOKEN") {
  TestServer server;
  auto stub = cv1::RelayControl::NewStub(server.connect());

  cv1::AuthorizeAttachRequest request;
  request.set_tunnel_id(std::string(kTunnelId));
  request.set_token(std::string(kToken));
  request.add_routes("");
  request.add_routes("api");
  request.set_origin("laptop");
  request.set_bridge_id("b9");
  request.set_peer_address("192.0.2.10:40000");
  request.set_max_conns(256);

  SUBCASE("good token") {
    grpc::ClientContext context;
    context.set_deadline(soon());
    cv1::AuthorizeAttachResponse response;
    REQUIRE(stub->AuthorizeAttach(&context, request, &response).ok());
    CHECK(response.result() == cv1::ATTACH_RESULT_OK);
    REQUIRE(response.has_record());
    CHECK(response.record().tunnel_id() == kTunnelId);
    CHECK(response.record().hostname() == std::string(kTunnelId) + ".tunnels.test");
    CHECK(response.record().certificate_state() == cv1::CERTIFICATE_STATE_READY);
  }
  SUBCASE("wrong token") {
    request.set_token(std::string(kToken) + "x");
    grpc::ClientContext context;
    context.set_deadline(soon());
    cv1::AuthorizeAttachResponse response;
    REQUIRE(stub->AuthorizeAttach(&context, request, &response).ok());
    CHECK(response.result() == cv1::ATTACH_RESULT_BAD_TOKEN);
    CHECK_FALSE(response.message().empty());
    CHECK_FALSE(response.has_record());
  }
  SUBCASE("right token, other tunnel") {
    request.set_tunnel_id("other1");
    grpc::ClientContext context;
    context.set_deadline(soon());
    cv1::AuthorizeAttachResponse response;
    REQUIRE(stub->AuthorizeAttach(&context, request, &response).ok());
    CHECK(response.result() == cv1::ATTACH_RESULT_BAD_TOKEN);
    CHECK_FALSE(response.has_record());
  }
}

TEST_CASE("FetchTunnel: a known tunnel comes with its record, an unknown one is not found") {
  TestServer server;
  auto stub = cv1::RelayControl::NewStub(server.connect());
  cv1::FetchTunnelRequest request;
  cv1::FetchTunnelResponse response;

  request.set_tunnel_id(std::string(kTunnelId));
  {
    grpc::ClientContext context;
    context.set_deadline(soon());
    REQUIRE(stub->FetchTunnel(&context, request, &response).ok());
  }
  CHECK(response.found());
  CHECK(response.record().revision() == 42);

  request.set_tunnel_id("nosuch");
  response.Clear();
  {
    grpc::ClientContext context;
    context.set_deadline(soon());
    REQUIRE(stub->FetchTunnel(&context, request, &response).ok());
  }
  CHECK_FALSE(response.found());
  CHECK_FALSE(response.has_record());
}

TEST_CASE("grpc.health.v1: the server and the control service are SERVING") {
  TestServer server;
  auto stub = hv1::Health::NewStub(server.connect());
  auto check = [&](const std::string& service, hv1::HealthCheckResponse& response) {
    grpc::ClientContext context;
    context.set_deadline(soon());
    hv1::HealthCheckRequest request;
    request.set_service(service);
    return stub->Check(&context, request, &response);
  };

  hv1::HealthCheckResponse response;
  REQUIRE(check("", response).ok());
  CHECK(response.status() == hv1::HealthCheckResponse::SERVING);
  response.Clear();
  REQUIRE(check("opentunnel.control.v1.RelayControl", response).ok());
  CHECK(response.status() == hv1::HealthCheckResponse::SERVING);
  CHECK(check("opentunnel.nosuch.v1.Service", response).error_code() ==
        grpc::StatusCode::NOT_FOUND);
}

TEST_CASE("reflection: lists the services and serves their descriptors") {
  // Forces the health descriptors into the link, as controld does.
  const auto files = ot::protoFilesForReflection();
  REQUIRE(files.size() == 3);
  CHECK(files[0] == "opentunnel/control/v1/control.proto");
  CHECK(files[1] == "opentunnel/admin/v1/admin.proto");
  CHECK(files[2] == "grpc/health/v1/health.proto");

  TestServer server;
  ot::testing::ReflectionClient reflection(server.connect());

  const auto services = reflection.listServices();
  CHECK(services.size() == 4);
  CHECK(contains(services, "opentunnel.control.v1.RelayControl"));
  CHECK(contains(services, "opentunnel.admin.v1.Admin"));
  CHECK(contains(services, "grpc.health.v1.Health"));
  CHECK(contains(services, "grpc.reflection.v1alpha.ServerReflection"));

  const auto control = reflection.filesContaining("opentunnel.control.v1.RelayControl");
  CHECK(contains(control, "opentunnel/control/v1/control.proto"));
  const auto admin = reflection.filesContaining("opentunnel.admin.v1.Admin");
  CHECK(contains(admin, "opentunnel/admin/v1/admin.proto"));
  CHECK(contains(admin, "opentunnel/control/v1/control.proto"));  // its import comes along
  const auto health = reflection.filesContaining("grpc.health.v1.Health");
  CHECK(contains(health, "grpc/health/v1/health.proto"));
}

TEST_CASE("Admin: registered without an implementation, every call is UNIMPLEMENTED") {
  TestServer server;
  auto stub = opentunnel::admin::v1::Admin::NewStub(server.connect());
  grpc::ClientContext context;
  context.set_deadline(soon());
  opentunnel::admin::v1::StatsResponse response;
  CHECK(stub->Stats(&context, {}, &response).error_code() == grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
