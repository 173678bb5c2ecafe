#include "controld/relays/grpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <system_error>
#include <utility>

#include "common/log.h"
#include "controld/base/private_files.h"
#include "opentunnel/control/v1/control.grpc.pb.h"
#include "proto/descriptors.h"

namespace ot::controld {
namespace {

const log::Logger& grpcServerLogger() {
  static const log::Logger instance("controld.grpc");
  return instance;
}

// Every name a health probe may ask about: the server as a whole ("") and each service.
std::array<std::string, 2> healthNames() {
  return {std::string(), std::string(opentunnel::control::v1::RelayControl::service_full_name())};
}

}  // namespace

GrpcServer::GrpcServer(GrpcServerOptions options, grpc::Service& control, RelayHub& hub)
    : options_(std::move(options)), control_(control), hub_(hub) {}

GrpcServer::~GrpcServer() {
  stop();
}

void enableGrpcHealthAndReflection() {
  // Process-wide switches; they take effect for servers built after them (harmless twice).
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // Keeps every contract's descriptors (grpc.health.v1 too) in the pool reflection serves from.
  [[maybe_unused]] const auto files = protoFilesForReflection();
}

Status GrpcServer::start() {
  const std::lock_guard lock(mutex_);
  if (server_ != nullptr) return Error{ErrorKind::kInvalid, "the gRPC server is already running"};
  auto socketLock = SocketLock::acquire(options_.socketPath);
  if (!socketLock.ok()) return socketLock.error();

  enableGrpcHealthAndReflection();

  grpc::ServerBuilder builder;
  builder.AddListeningPort(target(), grpc::InsecureServerCredentials());
  // relayd pings its idle session every 10 s to notice a frozen controld; gRPC's default policy
  // would answer that with GOAWAY too_many_pings and drop the session after ~30 s.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.RegisterService(&control_);
  // gRPC binds the socket inside BuildAndStart with the umask's mode (0777 under umask 000), and
  // it accepts from then on. The umask is narrowed for that call (start-up: no other thread of
  // ours creates files then), and the mode set explicitly after.
  const mode_t umaskBefore = ::umask(0777 & ~kSocketMode);
  auto server = builder.BuildAndStart();
  ::umask(umaskBefore);
  if (server != nullptr && ::chmod(options_.socketPath.c_str(), kSocketMode) != 0) {
    const int error = errno;
    server->Shutdown();
    server->Wait();
    return Error{ErrorKind::kUnavailable,
                 "cannot set the mode of " + options_.socketPath + ": " +
                     std::error_code(error, std::generic_category()).message()};
  }
  if (server == nullptr) {
    return Error{ErrorKind::kUnavailable,
                 "cannot serve gRPC on " + target() + " (is the directory there and writable?)"};
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  if (health != nullptr) {
    for (const auto& name : healthNames()) health->SetServingStatus(name, serving_);
  }
  server_ = std::move(server);
  lock_.emplace(std::move(socketLock).value());
  grpcServerLogger().info("gRPC server listening", {{"socket", options_.socketPath}});
  return Ok{};
}

void GrpcServer::setServing(bool serving) {
  const std::lock_guard lock(mutex_);
  serving_ = serving;
  if (server_ == nullptr) return;
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  if (health == nullptr) return;
  for (const auto& name : healthNames()) health->SetServingStatus(name, serving);
}

void GrpcServer::stop() {
  const std::lock_guard lock(mutex_);
  if (server_ == nullptr) return;
  // First the sessions, which never end on their own: Shutdown would wait out its whole grace
  // period for them, and ending them through the hub leaves the registry alone.
  hub_.shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + options_.shutdownGrace);
  server_->Wait();
  server_.reset();
  // Still under the lock, so no other controld can have bound the path in the meantime.
  if (unlink(options_.socketPath.c_str()) != 0 && errno != ENOENT) {
    grpcServerLogger().warn("cannot remove the gRPC socket",
                            {{"socket", options_.socketPath},
                             {"error", std::error_code(errno, std::generic_category()).message()}});
  }
  lock_.reset();
  grpcServerLogger().info("gRPC server stopped", {{"socket", options_.socketPath}});
}

bool GrpcServer::running() const {
  const std::lock_guard lock(mutex_);
  return server_ != nullptr;
}

}  // namespace ot::controld
