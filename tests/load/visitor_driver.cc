#include "tests/load/visitor_driver.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>

#include <array>
#include <chrono>
#include <memory>
#include <unordered_map>
#include <utility>

#include "tests/load/loop_buffers.h"
#include "tests/load/owned_write.h"

namespace ot::load {
namespace {

constexpr size_t kRoundBytes = 4096;
constexpr uint64_t kVisitorTimeoutMs = 10'000;

// The first flight of a TLS client for `hostname`: what a browser's ClientHello looks like to
// relayd, which routes on its SNI.
std::vector<uint8_t> clientHello(const std::string& hostname) {
  std::vector<uint8_t> bytes;
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) return bytes;
  SSL* ssl = SSL_new(ctx);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  if (ssl != nullptr && in != nullptr && out != nullptr) {
    SSL_set_bio(ssl, in, out);
    in = out = nullptr;
    SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
             const_cast<char*>(hostname.c_str()));
    SSL_set_connect_state(ssl);
    (void)SSL_do_handshake(ssl);  // wants to read: the ClientHello is in the write BIO
    char* data = nullptr;
    const long size = BIO_ctrl(SSL_get_wbio(ssl), BIO_CTRL_INFO, 0, &data);  // NOLINT(runtime/int)
    if (size > 0) bytes.assign(data, data + size);
  }
  BIO_free(in);
  BIO_free(out);
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return bytes;
}

struct DriverRun;

class Visitor {
 public:
  Visitor(DriverRun& run, const std::vector<uint8_t>& hello, in_addr source);
  void start();

 private:
  static void onConnect(uv_connect_t* req, int status);
  static void onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf);
  void send(std::vector<uint8_t> bytes);
  void expect(std::vector<uint8_t> bytes);
  void finish(bool ok);

  DriverRun& run_;
  in_addr source_;
  uv_tcp_t tcp_{};
  uv_connect_t connect_{};
  uv_timer_t timer_{};
  std::vector<uint8_t> expected_;
  size_t matched_ = 0;
  unsigned roundsLeft_ = 0;
  bool sawFirstByte_ = false;
  double firstByteMs_ = 0;
  bool closing_ = false;
  bool ok_ = false;
  int handlesOpen_ = 0;
  std::chrono::steady_clock::time_point start_;
};

struct DriverRun {
  uv_loop_t* loop;
  VisitorPlan plan;
  std::function<void(VisitorRun)> done;
  std::vector<std::vector<uint8_t>> hellos;  // one per tunnel
  uint64_t started = 0;
  VisitorRun result;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  void next() {
    if (started >= plan.count) return;
    const uint64_t i = started++;
    in_addr source{};
    source.s_addr = htonl(ntohl(plan.sourceBase.s_addr) +
                          static_cast<uint32_t>(i % static_cast<uint64_t>(plan.sources)));
    (new Visitor(*this, hellos[i % hellos.size()], source))->start();
  }
  void finished(bool ok, double firstByteMs) {
    if (ok) {
      ++result.completed;
      result.firstByteMs.push_back(firstByteMs);
    } else {
      ++result.failed;
    }
    if (result.completed + result.failed == plan.count) {
      result.seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      auto callback = std::move(done);
      VisitorRun outcome = std::move(result);
      delete this;
      callback(std::move(outcome));
      return;
    }
    next();
  }
};

Visitor::Visitor(DriverRun& run, const std::vector<uint8_t>& hello, in_addr source)
    : run_(run), source_(source), expected_(hello), roundsLeft_(run.plan.rounds) {
  tcp_.data = this;
  connect_.data = this;
  timer_.data = this;
}

void Visitor::start() {
  start_ = std::chrono::steady_clock::now();
  uv_tcp_init(run_.loop, &tcp_);
  uv_timer_init(run_.loop, &timer_);
  handlesOpen_ = 2;
  uv_timer_start(
      &timer_, [](uv_timer_t* t) { static_cast<Visitor*>(t->data)->finish(false); },
      kVisitorTimeoutMs, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr = source_;
  if (uv_tcp_bind(&tcp_, reinterpret_cast<const sockaddr*>(&local), 0) != 0 ||
      uv_tcp_connect(&connect_, &tcp_, reinterpret_cast<const sockaddr*>(&run_.plan.relay),
                     onConnect) != 0)
    finish(false);
}

void Visitor::onConnect(uv_connect_t* req, int status) {
  auto* self = static_cast<Visitor*>(req->data);
  if (self->closing_) return;
  if (status != 0) {
    self->finish(false);
    return;
  }
  uv_tcp_nodelay(&self->tcp_, 1);
  if (startReading(reinterpret_cast<uv_stream_t*>(&self->tcp_), onRead) != 0) {
    self->finish(false);
    return;
  }
  self->send(self->expected_);
}

void Visitor::onRead(uv_stream_t* stream, ssize_t nread, const uv_buf_t* buf) {
  auto* self = static_cast<Visitor*>(stream->data);
  if (self->closing_ || nread == 0) return;
  if (nread < 0) {
    self->finish(false);
    return;
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(buf->base);
  for (ssize_t i = 0; i < nread; ++i) {
    if (self->matched_ >= self->expected_.size() || bytes[i] != self->expected_[self->matched_]) {
      self->finish(false);  // not our echo
      return;
    }
    ++self->matched_;
  }
  if (!self->sawFirstByte_) {
    self->sawFirstByte_ = true;
    self->firstByteMs_ =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - self->start_)
            .count();
  }
  if (self->matched_ < self->expected_.size()) return;
  if (self->roundsLeft_ == 0) {
    self->finish(true);
    return;
  }
  --self->roundsLeft_;
  std::vector<uint8_t> round(kRoundBytes);
  RAND_bytes(round.data(), static_cast<int>(round.size()));
  self->expect(round);
  self->send(std::move(round));
}

void Visitor::expect(std::vector<uint8_t> bytes) {
  expected_ = std::move(bytes);
  matched_ = 0;
}

void Visitor::send(std::vector<uint8_t> bytes) {
  if (!writeOwned(reinterpret_cast<uv_stream_t*>(&tcp_), std::move(bytes))) finish(false);
}

void Visitor::finish(bool ok) {
  if (closing_) return;
  closing_ = true;
  ok_ = ok;
  auto closed = [](uv_handle_t* handle) {
    auto* self = static_cast<Visitor*>(handle->data);
    if (--self->handlesOpen_ > 0) return;
    DriverRun& run = self->run_;
    const bool succeeded = self->ok_;
    const double firstByteMs = self->firstByteMs_;
    delete self;
    run.finished(succeeded, firstByteMs);
  };
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), closed);
  uv_close(reinterpret_cast<uv_handle_t*>(&tcp_), closed);
}

}  // namespace

void startVisitors(uv_loop_t* loop, VisitorPlan plan, std::function<void(VisitorRun)> done) {
  auto* run = new DriverRun{loop, std::move(plan), std::move(done), {}, 0, {}};
  for (const TunnelCredentials& tunnel : run->plan.tunnels)
    run->hellos.push_back(clientHello(tunnel.id + "." + run->plan.domain));
  for (unsigned i = 0; i < run->plan.concurrency && i < run->plan.count; ++i) run->next();
}

}  // namespace ot::load
