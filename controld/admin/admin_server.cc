#include "controld/admin/admin_server.h"

#include <grpcpp/security/auth_metadata_processor.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>

#include "common/crypto.h"
#include "common/log.h"
#include "controld/base/private_files.h"
#include "controld/relays/grpc_server.h"
#include "opentunnel/admin/v1/admin.grpc.pb.h"

namespace ot::controld {
namespace {

const log::Logger& adminServerLogger() {
  static const log::Logger instance("controld.admin");
  return instance;
}

// Every call on the TLS port: "authorization: Bearer <token>", compared as SHA-256 digests in
// constant time (as the HTTP admin routes compare it), so neither the token's length nor its
// first differing byte shows in the time taken. Runs on gRPC's own threads.
class BearerTokenCheck final : public grpc::AuthMetadataProcessor {
 public:
  explicit BearerTokenCheck(const std::string& token) : digest_(crypto::sha256(token)) {}

  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata, grpc::AuthContext*, OutputMetadata* consumed,
                       OutputMetadata*) override {
    const auto found = metadata.find("authorization");
    if (found == metadata.end()) {
      return {grpc::StatusCode::UNAUTHENTICATED, "a bearer token is required"};
    }
    const std::string_view value(found->second.data(), found->second.size());
    constexpr std::string_view kBearer = "Bearer ";
    if (value.size() <= kBearer.size() || value.substr(0, kBearer.size()) != kBearer) {
      return {grpc::StatusCode::UNAUTHENTICATED, "a bearer token is required"};
    }
    const crypto::Sha256Digest given = crypto::sha256(value.substr(kBearer.size()));
    if (!crypto::constantTimeEqual(given, digest_)) {
      return {grpc::StatusCode::UNAUTHENTICATED, "not the admin token"};
    }
    consumed->insert(std::make_pair(std::string(found->first.data(), found->first.size()),
                                    std::string(found->second.data(), found->second.size())));
    return grpc::Status::OK;
  }

 private:
  const crypto::Sha256Digest digest_;
};

Result<std::string> readPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{ErrorKind::kInvalid, std::string("cannot read ") + what + " " + path};
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().empty()) {
    return Error{ErrorKind::kInvalid, std::string(what) + " " + path + " is empty"};
  }
  return text.str();
}

}  // namespace

std::string defaultAdminSocket(const std::string& controlSocket) {
  constexpr std::string_view kControl = "control.sock";
  const std::filesystem::path path(controlSocket);
  std::string name = path.filename().string();
  if (name.size() >= kControl.size() &&
      name.compare(name.size() - kControl.size(), kControl.size(), kControl) == 0) {
    name.replace(name.size() - kControl.size(), kControl.size(), "admin.sock");
  } else {
    name = "admin.sock";
  }
  return (path.parent_path() / name).string();
}

Status checkAdminServerOptions(const AdminServerOptions& options) {
  if (options.socketPath.empty()) return Error{ErrorKind::kInvalid, "ADMIN_SOCKET is empty"};
  if (!options.tcp.enabled()) return Ok{};
  if (options.tcp.kind != config::ListenAddress::Kind::kTcp) {
    return Error{ErrorKind::kInvalid,
                 "ADMIN_LISTEN must be host:port (the unix socket is "
                 "ADMIN_SOCKET)"};
  }
  if (options.tlsCertFile.empty() || options.tlsKeyFile.empty()) {
    return Error{ErrorKind::kInvalid,
                 "ADMIN_LISTEN needs TLS: set ADMIN_TLS_CERT and ADMIN_TLS_KEY (the Admin service "
                 "is never served in clear text on TCP)"};
  }
  if (options.token.empty()) {
    return Error{ErrorKind::kInvalid,
                 "ADMIN_LISTEN needs ADMIN_TOKEN: every call on TCP must carry it"};
  }
  return Ok{};
}

AdminServer::AdminServer(AdminServerOptions options, grpc::Service& admin)
    : options_(std::move(options)), admin_(admin) {}

AdminServer::~AdminServer() {
  stop();
}

Status AdminServer::start() {
  if (server_ != nullptr) return Error{ErrorKind::kInvalid, "the admin server is already running"};
  if (const Status checked = checkAdminServerOptions(options_); !checked) return checked;
  std::shared_ptr<grpc::ServerCredentials> tls;
  if (options_.tcp.enabled()) {
    auto chain = readPem(options_.tlsCertFile, "ADMIN_TLS_CERT");
    if (!chain) return chain.error();
    auto key = readPem(options_.tlsKeyFile, "ADMIN_TLS_KEY");
    if (!key) return key.error();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({std::move(key).value(), std::move(chain).value()});
    tls = grpc::SslServerCredentials(ssl);
    tls->SetAuthMetadataProcessor(std::make_shared<BearerTokenCheck>(options_.token));
  }
  auto socketLock = SocketLock::acquire(options_.socketPath);
  if (!socketLock.ok()) return socketLock.error();

  enableGrpcHealthAndReflection();

  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + options_.socketPath, grpc::InsecureServerCredentials());
  if (tls) builder.AddListeningPort(options_.tcp.toString(), tls, &tcpPort_);
  builder.RegisterService(&admin_);
  // As the control socket: bound inside BuildAndStart under the process umask, so the umask is
  // narrowed for the call and the mode set after (start-up: no other thread creates files).
  const mode_t umaskBefore = ::umask(0777 & ~kSocketMode);
  auto server = builder.BuildAndStart();
  ::umask(umaskBefore);
  if (server == nullptr) {
    return Error{ErrorKind::kUnavailable,
                 "cannot serve the Admin service on unix:" + options_.socketPath +
                     (tls ? " and " + options_.tcp.toString() : std::string()) +
                     " (is the directory there, the port free?)"};
  }
  if (::chmod(options_.socketPath.c_str(), kSocketMode) != 0) {
    const int error = errno;
    server->Shutdown();
    server->Wait();
    return Error{ErrorKind::kUnavailable,
                 "cannot set the mode of " + options_.socketPath + ": " +
                     std::error_code(error, std::generic_category()).message()};
  }
  if (grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService()) {
    health->SetServingStatus("", true);
    health->SetServingStatus(std::string(opentunnel::admin::v1::Admin::service_full_name()), true);
  }
  server_ = std::move(server);
  lock_.emplace(std::move(socketLock).value());
  adminServerLogger().info(
      "Admin service listening",
      {{"socket", options_.socketPath},
       {"tcp", tls ? options_.tcp.host + ":" + std::to_string(tcpPort_) : "off"}});
  return Ok{};
}

void AdminServer::stop() {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + options_.shutdownGrace);
  server_->Wait();
  server_.reset();
  if (::unlink(options_.socketPath.c_str()) != 0 && errno != ENOENT) {
    adminServerLogger().warn(
        "cannot remove the admin socket",
        {{"socket", options_.socketPath},
         {"error", std::error_code(errno, std::generic_category()).message()}});
  }
  lock_.reset();
  tcpPort_ = 0;
}

}  // namespace ot::controld
