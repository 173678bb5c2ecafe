// otctl's connection to controld's Admin service: the unix socket (ADMIN_SOCKET; the filesystem
// authenticates), or TCP with TLS and the bearer token (ADMIN_TOKEN). Every call's context carries
// the token and a deadline.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "opentunnel/admin/v1/admin.grpc.pb.h"

namespace ot::otctl {

namespace av1 = ::opentunnel::admin::v1;

struct ConnectOptions {
  std::string socket = "/run/opentunnel/admin.sock";
  std::string address;  // host:port: TCP with TLS instead of the socket
  std::string token;
  std::string caFile;   // PEM roots for the server's certificate; "" the system's
  std::string tlsName;  // the name the certificate must hold, when not the address's host
  std::chrono::seconds timeout{30};
  bool json = false;  // --json: output for scripts
};

class Client {
 public:
  explicit Client(ConnectOptions options);

  // Connects (within 5 s). false, with a message on stderr, when controld cannot be reached
  // (exit 4) or a TLS file cannot be read.
  [[nodiscard]] bool connect();
  // A context with the token and the call's deadline (none for the streams: an export of 100,000
  // tunnels takes what it takes).
  [[nodiscard]] std::unique_ptr<grpc::ClientContext> context(bool deadline = true) const;
  [[nodiscard]] av1::Admin::Stub& stub() { return *stub_; }
  [[nodiscard]] const ConnectOptions& options() const { return options_; }

  // Prints "otctl: <what>: <message>" on stderr and returns the status's exit code.
  int fail(const char* what, const grpc::Status& status) const;

 private:
  ConnectOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<av1::Admin::Stub> stub_;
};

}  // namespace ot::otctl
