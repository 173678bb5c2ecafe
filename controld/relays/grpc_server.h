// controld's gRPC server on a unix socket (only relayd reaches it): the RelayControl service,
// grpc.health.v1 and server reflection (so grpcurl works). The Admin service has its own socket
// (controld/admin/admin_server.h), so relayd's identity is not also an operator's. The socket is
// guarded by a SocketLock. Health starts NOT_SERVING for every service; the owner calls
// setServing(true) once the database answers. Owned by controld's main; start(), setServing() and
// stop() may be called from any thread, the services must outlive the server.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/result.h"
#include "controld/relays/relay_hub.h"
#include "controld/relays/socket_lock.h"

namespace ot::controld {

// Turns on grpc.health.v1 and server reflection for every gRPC server this process builds after
// the call (the control socket's and the Admin service's).
void enableGrpcHealthAndReflection();

struct GrpcServerOptions {
  std::string socketPath;  // a filesystem path; the server listens on unix:<socket_path>
  // How long stop() lets unary calls finish before cancelling them.
  std::chrono::milliseconds shutdownGrace{2000};
};

class GrpcServer {
 public:
  GrpcServer(GrpcServerOptions options, grpc::Service& control, RelayHub& hub);
  ~GrpcServer();  // stop()
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  // Locks the socket, removes a stale socket file and starts serving (health NOT_SERVING unless
  // setServing(true) came first).
  // kConflict while another controld serves on the path.
  [[nodiscard]] Status start();
  // Sets every service's health ("" included) to SERVING or NOT_SERVING. Remembered, so it may
  // be called before start().
  void setServing(bool serving);
  // Ends the relay sessions (without dropping their bridges from the registry), stops the server,
  // removes the socket file and releases the lock. Idempotent.
  void stop();

  [[nodiscard]] std::string target() const { return "unix:" + options_.socketPath; }
  [[nodiscard]] bool running() const;

 private:
  const GrpcServerOptions options_;
  grpc::Service& control_;
  RelayHub& hub_;

  mutable std::mutex mutex_;
  bool serving_ = false;
  std::optional<SocketLock> lock_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace ot::controld
