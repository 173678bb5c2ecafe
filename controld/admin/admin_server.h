// The Admin gRPC service's server (docs/admin.md "Sockets and authentication"): on a unix socket
// of its own (mode 0660: controld's user and group; the filesystem is the authentication), and
// optionally on TCP with TLS, where every call must carry "authorization: Bearer <ADMIN_TOKEN>".
// Reflection and grpc.health.v1 are served too, so grpcurl works on either.
//
// A server apart from the control socket's: relayd's identity reaches the control socket, and an
// Admin call (an export, a long list) never takes a thread from the relay sessions.
// start() and stop() from the owner's thread; the service must outlive the server.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "common/config.h"
#include "common/result.h"
#include "controld/relays/socket_lock.h"

namespace ot::controld {

struct AdminServerOptions {
  std::string socketPath;       // served as unix:<socketPath>
  config::ListenAddress tcp{};  // off, or host:port for the TLS listener
  std::string tlsCertFile;      // PEM chain, with tcp
  std::string tlsKeyFile;       // PEM key, with tcp
  std::string token;            // ADMIN_TOKEN, required with tcp
  std::chrono::milliseconds shutdownGrace{2000};
};

// ADMIN_SOCKET's default: beside the control socket, its name's "control.sock" turned into
// "admin.sock" (/run/opentunnel/control.sock -> /run/opentunnel/admin.sock), so two controlds
// with their own control sockets also have their own admin sockets. Pure.
[[nodiscard]] std::string defaultAdminSocket(const std::string& controlSocket);

// kInvalid when TCP is asked for without TLS files or without a token: an Admin port open to a
// network with neither would hand the service (deletions, the export with every token hash) to
// anyone who reaches it. Pure.
[[nodiscard]] Status checkAdminServerOptions(const AdminServerOptions& options);

class AdminServer {
 public:
  AdminServer(AdminServerOptions options, grpc::Service& admin);
  ~AdminServer();  // stop()
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Checks the options, reads the TLS files, locks and binds the socket (and the TCP port).
  [[nodiscard]] Status start();
  // Stops serving, removes the socket file, releases the lock. Idempotent.
  void stop();

  // The TCP port bound (ADMIN_LISTEN's, or the one chosen for port 0); 0 without TCP.
  [[nodiscard]] int tcpPort() const { return tcpPort_; }

 private:
  const AdminServerOptions options_;
  grpc::Service& admin_;
  std::optional<SocketLock> lock_;
  std::unique_ptr<grpc::Server> server_;
  int tcpPort_ = 0;
};

}  // namespace ot::controld
