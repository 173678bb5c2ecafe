#include "client/origin_material.h"

#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>

#include "client/key_material.h"

namespace ot::client {
namespace {

constexpr size_t kMaxFileSize = 1 << 20;

Error invalid(std::string message) {
  return Error{ErrorKind::kInvalid, std::move(message)};
}

std::string stringMember(const nlohmann::json& document, const char* name) {
  const auto it = document.find(name);
  return it != document.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Blocking; "" when the file cannot be read.
std::string readSmallFile(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = in.good();
  if (!*ok) return {};
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.size() > kMaxFileSize) *ok = false;
  return text;
}

struct ReadJob {
  uv_work_t req{};
  OriginReloader* owner = nullptr;
  std::string path;
  std::string text;
  bool ok = false;
};

}  // namespace

Result<TunnelState> parseOriginState(const std::string& text, bool needChain) {
  const auto document = nlohmann::json::parse(text, nullptr, false);
  if (!document.is_object()) return invalid("not a JSON object");
  TunnelState state;
  state.server = stringMember(document, "server");
  state.id = stringMember(document, "id");
  state.hostname = stringMember(document, "hostname");
  state.url = stringMember(document, "url");
  state.keyPem = stringMember(document, "key");
  state.chainPem = stringMember(document, "chain");
  if (state.id.empty() || state.hostname.empty()) return invalid("id or hostname missing");
  if (state.keyPem.empty() || !checkPrivateKeyPem(state.keyPem).ok()) {
    return invalid("no usable private key (\"key\")");
  }
  if (needChain && state.chainPem.empty()) {
    return invalid(
        "no certificate (\"chain\"): copy the file again once the owner's otunnel has "
        "its certificate");
  }
  return state;  // the token, if the copy still has one, is left out on purpose
}

Result<Provisioned> loadOriginMaterial(const std::string& path, bool needChain) {
  bool ok = false;
  const std::string text = readSmallFile(path, &ok);
  if (!ok) {
    return invalid(
        "with --credential, otunnel needs the tunnel's state file copied from the "
        "owner's machine (without its token) at " +
        path);
  }
  auto state = parseOriginState(text, needChain);
  if (!state.ok()) return invalid(path + ": " + state.error().message);
  Provisioned provisioned;
  provisioned.state = std::move(state).value();
  provisioned.statePath = path;
  return provisioned;
}

OriginReloader::OriginReloader(uv_loop_t* loop, std::string path, std::string keyPem,
                               std::string chainPem, std::chrono::milliseconds interval,
                               OnRenewed onRenewed)
    : loop_(loop),
      path_(std::move(path)),
      keyPem_(std::move(keyPem)),
      chainPem_(std::move(chainPem)),
      interval_(interval),
      onRenewed_(std::move(onRenewed)) {
  (void)uv_timer_init(loop_, &timer_);
  timer_.data = this;
}

void OriginReloader::start() {
  const auto ms = static_cast<uint64_t>(interval_.count());
  (void)uv_timer_start(&timer_, &OriginReloader::onTick, ms, ms);
}

void OriginReloader::close() {
  if (closed_) return;
  closed_ = true;
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
}

void OriginReloader::onTick(uv_timer_t* timer) {
  auto* self = static_cast<OriginReloader*>(timer->data);
  if (self->closed_ || self->reading_) return;
  auto job = std::make_unique<ReadJob>();
  job->req.data = job.get();
  job->owner = self;
  job->path = self->path_;
  const int rc = uv_queue_work(
      self->loop_, &job->req,
      [](uv_work_t* req) {
        auto* work = static_cast<ReadJob*>(req->data);
        work->text = readSmallFile(work->path, &work->ok);
      },
      [](uv_work_t* req, int) {
        std::unique_ptr<ReadJob> work(static_cast<ReadJob*>(req->data));
        OriginReloader* owner = work->owner;
        owner->reading_ = false;
        if (owner->closed_ || !work->ok) return;
        auto state = parseOriginState(work->text, true);
        // Another key would not match the certificate otunnel serves with: wait for a restart.
        if (!state.ok() || state->keyPem != owner->keyPem_ || state->chainPem == owner->chainPem_)
          return;
        owner->chainPem_ = state->chainPem;
        if (owner->onRenewed_) owner->onRenewed_(owner->chainPem_);
      });
  if (rc != 0) return;
  (void)job.release();
  self->reading_ = true;
}

}  // namespace ot::client
