#include "otctl/client.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>

#include "otctl/exit_codes.h"

namespace ot::otctl {

Client::Client(ConnectOptions options) : options_(std::move(options)) {}

bool Client::connect() {
  grpc::ChannelArguments arguments;
  std::string target;
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options_.address.empty()) {
    target = "unix:" + options_.socket;
    credentials = grpc::InsecureChannelCredentials();
  } else {
    target = options_.address;
    grpc::SslCredentialsOptions ssl;
    if (!options_.caFile.empty()) {
      std::ifstream in(options_.caFile, std::ios::binary);
      if (!in) {
        std::fprintf(stderr, "otctl: cannot read --ca %s\n", options_.caFile.c_str());
        return false;
      }
      std::ostringstream text;
      text << in.rdbuf();
      ssl.pem_root_certs = text.str();
    }
    credentials = grpc::SslCredentials(ssl);
    if (!options_.tlsName.empty()) {
      arguments.SetSslTargetNameOverride(options_.tlsName);
    }
  }
  channel_ = grpc::CreateCustomChannel(target, credentials, arguments);
  if (!channel_->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(5))) {
    std::fprintf(stderr, "otctl: cannot reach controld at %s\n", target.c_str());
    return false;
  }
  stub_ = av1::Admin::NewStub(channel_);
  return true;
}

std::unique_ptr<grpc::ClientContext> Client::context(bool deadline) const {
  auto context = std::make_unique<grpc::ClientContext>();
  if (!options_.token.empty() && !options_.address.empty()) {
    context->AddMetadata("authorization", "Bearer " + options_.token);
  }
  if (deadline) context->set_deadline(std::chrono::system_clock::now() + options_.timeout);
  return context;
}

int Client::fail(const char* what, const grpc::Status& status) const {
  const int code = exitCodeOf(status);
  if (code == kExitUnreachable) {
    std::fprintf(stderr, "otctl: %s: controld refused the credentials: %s\n", what,
                 status.error_message().c_str());
  } else {
    std::fprintf(stderr, "otctl: %s: %s\n", what, status.error_message().c_str());
  }
  return code;
}

}  // namespace ot::otctl
