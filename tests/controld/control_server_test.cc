// controld's gRPC server: the socket lock (one controld per socket, stale sockets replaced),
// health as the owner sets it, reflection, and no Admin service (it has its own socket).
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "controld/relays/socket_lock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "opentunnel/admin/v1/admin.grpc.pb.h"
#include "proto/descriptors.h"
#include "tests/controld/control_harness.h"
#include "tests/unit_grpc/reflection_client.h"

namespace ot::controld {
namespace {

namespace hv1 = grpc::health::v1;
using testing::Harness;
using testing::HarnessOptions;
using testing::soon;

// A second controld's parts on the same store.
struct SecondControld {
  explicit SecondControld(Store& store, const std::string& socketPath)
      : hub(registry),
        service(store, registry, hub),
        server(GrpcServerOptions{socketPath}, service, hub) {}
  BridgeRegistry registry;
  RelayHub hub;
  ControlService service;
  GrpcServer server;
};

hv1::HealthCheckResponse::ServingStatus health(const std::shared_ptr<grpc::Channel>& channel,
                                               const std::string& service) {
  auto stub = hv1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(soon());
  hv1::HealthCheckRequest request;
  request.set_service(service);
  hv1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  REQUIRE_MESSAGE(status.ok(), status.error_message());
  return response.status();
}

std::shared_ptr<grpc::Channel> connectTo(const std::string& target) {
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  REQUIRE(channel->WaitForConnected(soon(10)));
  return channel;
}

// Leaves a unix socket file behind with nobody listening, as a crashed controld does.
void leaveStaleSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof(address.sun_path));
  std::copy(path.begin(), path.end(), address.sun_path);
  REQUIRE(bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0);
  close(fd);
  REQUIRE(std::filesystem::is_socket(path));
}

TEST_CASE("control: a second controld on the same socket fails clearly while the first runs") {
  Harness h;
  SecondControld second(h.store(), h.socketPath());

  const Status refused = second.server.start();
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().kind == ErrorKind::kConflict);
  const std::string expected = "another controld (pid " + std::to_string(getpid()) +
                               ") is serving on " + h.socketPath() + " (it holds " +
                               h.socketPath() + ".lock)";
  CHECK(refused.error().message == expected);
  CHECK_FALSE(second.server.running());
  // The first one still serves on its socket.
  CHECK(health(h.connect(), "") == hv1::HealthCheckResponse::SERVING);

  h.server().stop();
  const Status started = second.server.start();
  REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().message));
  CHECK(health(connectTo(second.server.target()), "") == hv1::HealthCheckResponse::NOT_SERVING);
  second.server.stop();
}

TEST_CASE("control: socket lock: stale sockets are replaced, other files are not") {
  testing::TempDir dir;
  const std::string path = (dir.path() / "control.sock").string();
  auto store = testing::openTestStore(dir.path() / "store.db");

  SUBCASE("a socket file nobody holds the lock for") {
    leaveStaleSocket(path);
    SecondControld controld(*store, path);
    controld.server.setServing(true);  // before start: remembered
    const Status started = controld.server.start();
    REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().message));
    CHECK(health(connectTo(controld.server.target()), "") == hv1::HealthCheckResponse::SERVING);
  }
  SUBCASE("a regular file in the way") {
    std::ofstream(path) << "keep me";
    SecondControld controld(*store, path);
    const Status refused = controld.server.start();
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().kind == ErrorKind::kInvalid);
    CHECK(refused.error().message == path + " exists and is not a socket; refusing to replace it");
    CHECK(std::filesystem::is_regular_file(path));
  }
  SUBCASE("the lock alone") {
    auto first = SocketLock::acquire(path);
    REQUIRE(first.ok());
    CHECK(first->lockPath() == path + ".lock");
    auto second = SocketLock::acquire(path);
    REQUIRE_FALSE(second.ok());
    CHECK(second.error().kind == ErrorKind::kConflict);
    SocketLock moved = std::move(first).value();  // moving keeps the lock held
    CHECK_FALSE(SocketLock::acquire(path).ok());
    { const SocketLock released = std::move(moved); }
    CHECK(SocketLock::acquire(path).ok());
    CHECK(std::filesystem::exists(path + ".lock"));  // never removed
  }
  SUBCASE("paths that cannot work") {
    auto tooLong = SocketLock::acquire("/tmp/" + std::string(120, 's'));
    REQUIRE_FALSE(tooLong.ok());
    CHECK(tooLong.error().kind == ErrorKind::kInvalid);
    auto noDirectory = SocketLock::acquire((dir.path() / "missing" / "control.sock").string());
    REQUIRE_FALSE(noDirectory.ok());
    CHECK(noDirectory.error().kind == ErrorKind::kUnavailable);
  }
}

TEST_CASE("control: health is NOT_SERVING until the owner says SERVING") {
  Harness h(HarnessOptions{10000, nullptr, false});
  auto channel = h.connect();
  const std::vector<std::string> names = {"", "opentunnel.control.v1.RelayControl"};
  for (const auto& name : names) {
    CAPTURE(name);
    CHECK(health(channel, name) == hv1::HealthCheckResponse::NOT_SERVING);
  }
  h.server().setServing(true);
  for (const auto& name : names) {
    CAPTURE(name);
    CHECK(health(channel, name) == hv1::HealthCheckResponse::SERVING);
  }
  h.server().setServing(false);
  CHECK(health(channel, "") == hv1::HealthCheckResponse::NOT_SERVING);
}

TEST_CASE("control: reflection lists the services; Admin is not served on the control socket") {
  Harness h;
  ot::testing::ReflectionClient reflection(h.connect());
  auto services = reflection.listServices();
  std::sort(services.begin(), services.end());
  CHECK(services == std::vector<std::string>{"grpc.health.v1.Health",
                                             "grpc.reflection.v1alpha.ServerReflection",
                                             "opentunnel.control.v1.RelayControl"});
  const auto files = reflection.filesContaining("opentunnel.control.v1.RelayControl");
  CHECK(std::find(files.begin(), files.end(), "opentunnel/control/v1/control.proto") !=
        files.end());

  auto admin = opentunnel::admin::v1::Admin::NewStub(h.connect());
  grpc::ClientContext context;
  context.set_deadline(soon());
  opentunnel::admin::v1::StatsResponse response;
  CHECK(admin->Stats(&context, {}, &response).error_code() == grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace ot::controld
