// TlsEngine (tls_engine.h): the memory BIO and the per-connection engine. The contexts it runs on
// (certificates, trust, ALPN, cipher suites) are made in tls_context.cc.
#include "common/tls_engine.h"

#include <arpa/inet.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "common/byte_buffer_pool.h"
#include "common/openssl_errors.h"
#include "common/openssl_ptr.h"
#include "common/tls_engine_state.h"
#include "common/tls_sessions.h"

namespace ot::tls {
namespace {

// ---- memory BIO -------------------------------------------------------------------------------

int bioWrite(BIO* bio, const char* data, int len) {
  BIO_clear_retry_flags(bio);
  auto* queues = static_cast<MemoryQueues*>(BIO_get_data(bio));
  if (queues == nullptr || len < 0) return -1;
  const auto* bytes = reinterpret_cast<const uint8_t*>(data);
  queues->out.insert(queues->out.end(), bytes, bytes + len);
  if (queues->counting) queues->counting->writes.pass({bytes, static_cast<size_t>(len)});
  return len;
}

std::span<const uint8_t> bytesOf(const char* data, size_t n) {
  return {reinterpret_cast<const uint8_t*>(data), n};
}

int bioRead(BIO* bio, char* data, int len) {
  BIO_clear_retry_flags(bio);
  auto* queues = static_cast<MemoryQueues*>(BIO_get_data(bio));
  if (queues == nullptr || len < 0) return -1;
  const size_t available = queues->in.size() - queues->inPos;
  if (available == 0) {
    if (queues->lent.empty()) {
      BIO_set_retry_read(bio);
      return -1;
    }
    // Straight from the caller's buffer: the bytes are copied once, into OpenSSL's record buffer.
    const size_t n = std::min(queues->lent.size(), static_cast<size_t>(len));
    std::memcpy(data, queues->lent.data(), n);
    queues->lent = queues->lent.subspan(n);
    if (queues->counting) queues->counting->reads.pass(bytesOf(data, n));
    return static_cast<int>(n);
  }
  const size_t n = std::min(available, static_cast<size_t>(len));
  std::memcpy(data, queues->in.data() + queues->inPos, n);
  queues->inPos += n;
  if (queues->counting) queues->counting->reads.pass(bytesOf(data, n));
  if (queues->inPos == queues->in.size()) {
    queues->in.clear();  // keep capacity; releaseIdleBuffers frees it after the call
    queues->inPos = 0;
  }
  return static_cast<int>(n);
}

long bioCtrl(BIO*, int cmd, long, void*) {
  // Nothing to flush: bytes land in memory at once. Everything else is unsupported (0).
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

int bioCreate(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

int bioDestroy(BIO* bio) {
  BIO_set_data(bio, nullptr);  // the engine owns the queues
  return 1;
}

// One method table per process, built on first use (thread-safe static) and never freed.
const BIO_METHOD* memoryMethod() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "ot-tls-memory");
    if (m != nullptr) {
      BIO_meth_set_write(m, bioWrite);
      BIO_meth_set_read(m, bioRead);
      BIO_meth_set_ctrl(m, bioCtrl);
      BIO_meth_set_create(m, bioCreate);
      BIO_meth_set_destroy(m, bioDestroy);
    }
    return m;
  }();
  return method;
}

bool isIpLiteral(const std::string& name) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

}  // namespace

// ---- engine -----------------------------------------------------------------------------------

TlsEngine::TlsEngine(SslCtxPtr ctx, SSL* ssl)
    : ctx_(std::move(ctx)), ssl_(ssl), bio_(std::make_unique<BioState>()) {
  const BIO_METHOD* method = memoryMethod();
  BIO* bio = method != nullptr ? BIO_new(method) : nullptr;
  if (bio == nullptr) {
    error_ = "cannot create the memory BIO";  // every later call reports kError
    return;
  }
  BIO_set_data(bio, static_cast<MemoryQueues*>(bio_.get()));
  SSL_set_bio(ssl_, bio, bio);  // one reference, owned by the SSL
}

TlsEngine::~TlsEngine() {
  SSL_free(ssl_);  // null once detached
}

std::unique_ptr<TlsEngine> TlsEngine::server(SslCtxPtr ctx, bool keepTrafficSecrets) {
  if (!ctx) return nullptr;
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx.get());
  if (ssl == nullptr) return nullptr;
  SSL_set_accept_state(ssl);
  std::unique_ptr<TlsEngine> engine(new TlsEngine(std::move(ctx), ssl));
  if (keepTrafficSecrets) SSL_set_ex_data(ssl, engineIndex(), engine.get());
  return engine;
}

std::unique_ptr<TlsEngine> TlsEngine::client(SslCtxPtr ctx, const std::string& serverName,
                                             bool verifyName, const std::string& sessionKey,
                                             bool keepTrafficSecrets) {
  if (!ctx) return nullptr;
  ERR_clear_error();
  SSL* ssl = SSL_new(ctx.get());
  if (ssl == nullptr) return nullptr;
  std::unique_ptr<TlsEngine> engine(new TlsEngine(std::move(ctx), ssl));
  if (keepTrafficSecrets) SSL_set_ex_data(ssl, engineIndex(), engine.get());
  const bool ip = isIpLiteral(serverName);
  bool ok = true;
  // SNI carries DNS names only (RFC 6066 forbids IP literals).
  // (SSL_set_tlsext_host_name spelled out: the macro's C cast trips -Wold-style-cast.)
  if (!serverName.empty() && !ip) {
    ok = SSL_ctrl(ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
                  const_cast<char*>(serverName.c_str())) == 1;
  }
  if (ok && verifyName) {
    if (ip) {
      ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), serverName.c_str()) == 1;
    } else {
      ok = SSL_set1_host(ssl, serverName.c_str()) == 1;
    }
  }
  if (!ok && engine->error_.empty())
    engine->error_ = "cannot set server name: " + opensslErrorText();
  offerHeldSession(ssl, sessionKey.empty() ? serverName : sessionKey);
  SSL_set_connect_state(ssl);
  return engine;
}

void TlsEngine::feed(std::span<const uint8_t> ciphertext) {
  keepUnread();  // lent bytes came first
  auto& in = bio_->in;
  if (bio_->inPos > 0) {  // compact before growing
    in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(bio_->inPos));
    bio_->inPos = 0;
  }
  in.insert(in.end(), ciphertext.begin(), ciphertext.end());
  releaseIdleBuffers();
}

void TlsEngine::lend(std::span<const uint8_t> ciphertext) {
  keepUnread();  // an earlier loan's rest came first
  bio_->lent = ciphertext;
}

void TlsEngine::keepUnread() {
  if (bio_->lent.empty()) return;
  const std::span<const uint8_t> rest = bio_->lent;
  bio_->lent = {};
  feed(rest);
}

TlsStatus TlsEngine::handshake() {
  if (!error_.empty()) return TlsStatus::kError;
  if (detached_ || SSL_is_init_finished(ssl_) == 1) return TlsStatus::kOk;
  ERR_clear_error();
  const int ret = SSL_do_handshake(ssl_);
  TlsStatus status = TlsStatus::kOk;
  if (ret != 1) {
    const int err = SSL_get_error(ssl_, ret);
    status = err == SSL_ERROR_WANT_READ ? TlsStatus::kWantRead : fail(ret, "handshake");
  } else if (SSL_get_ex_data(ssl_, engineIndex()) != nullptr) {
    onHandshakeComplete();
  }
  releaseIdleBuffers();
  return status;
}

bool TlsEngine::handshakeDone() const {
  return detached_ || SSL_is_init_finished(ssl_) == 1;
}

ReadResult TlsEngine::read(std::span<uint8_t> out) {
  ReadResult result;
  if (!error_.empty()) {
    result.status = TlsStatus::kError;
    return result;
  }
  if (detached_) return detachedRead(out, result);
  while (result.bytes < out.size()) {
    if (proving()) {
      tryDetach();  // at a record boundary, before OpenSSL reads the next record
      if (detached_) return detachedRead(out, result);
    }
    // After a record, another SSL_read with no ciphertext left and nothing decoded inside can only
    // answer "want read", and costs OpenSSL a record buffer allocated and freed again
    // (SSL_MODE_RELEASE_BUFFERS): on an idle bridge that doubled the cost of reading a pong.
    if (result.bytes > 0 && bio_->inPos == bio_->in.size() && bio_->lent.empty() &&
        SSL_has_pending(ssl_) == 0) {
      result.status = TlsStatus::kWantRead;
      break;
    }
    size_t n = 0;
    ERR_clear_error();
    const size_t outBefore = bio_->out.size();
    const int ret = SSL_read_ex(ssl_, out.data() + result.bytes, out.size() - result.bytes, &n);
    // OpenSSL answered something (a KeyUpdate, an alert) with keys we can no longer follow.
    if (bio_->out.size() != outBefore && proving()) giveUp(DetachResult::kKeptUnproven);
    if (ret == 1) {
      result.bytes += n;
      continue;
    }
    const int err = SSL_get_error(ssl_, ret);
    if (err == SSL_ERROR_WANT_READ) {
      result.status = TlsStatus::kWantRead;
    } else if (err == SSL_ERROR_ZERO_RETURN) {
      result.status = TlsStatus::kClosed;
    } else {
      result.status = fail(ret, "read");
    }
    break;
  }
  releaseIdleBuffers();
  return result;
}

TlsStatus TlsEngine::write(std::span<const uint8_t> plaintext) {
  if (!error_.empty()) return TlsStatus::kError;
  if (plaintext.empty()) return TlsStatus::kOk;
  if (detached_) {
    const std::span<const uint8_t> one[1] = {plaintext};
    return detachedWrite(one);
  }
  // Before the handshake is complete SSL_write would block on input, and the caller's plaintext
  // would be only partly taken: report kWantRead and take nothing.
  if (SSL_is_init_finished(ssl_) != 1) return TlsStatus::kWantRead;
  // Room for every record this write makes, so the output queue grows once instead of doubling
  // (and moving what it holds) record by record: on the data path that copy cost as much as the
  // encryption. AEAD suites only, so a record adds at most 29 bytes (TLS 1.2 GCM); 64 is ample.
  constexpr size_t kRecordPlaintext = 16384;
  constexpr size_t kRecordOverhead = 64;
  const size_t records = (plaintext.size() + kRecordPlaintext - 1) / kRecordPlaintext;
  auto& out = bio_->out;
  const size_t outStart = out.size();
  const size_t needed = out.size() + plaintext.size() + records * kRecordOverhead;
  // At least doubling, so callers that write many times before taking the output stay linear.
  if (needed > out.capacity()) out.reserve(std::max(needed, 2 * out.capacity()));
  size_t done = 0;
  TlsStatus status = TlsStatus::kOk;
  while (done < plaintext.size()) {
    size_t n = 0;
    ERR_clear_error();
    const int ret = SSL_write_ex(ssl_, plaintext.data() + done, plaintext.size() - done, &n);
    if (ret != 1) {
      status = fail(ret, "write");
      break;
    }
    done += n;
  }
  if (status == TlsStatus::kOk && proving() && !capture_->writeProven) {
    proveWrite(outStart, plaintext);
  }
  releaseIdleBuffers();
  return status;
}

TlsStatus TlsEngine::writeGather(std::span<const std::span<const uint8_t>> pieces) {
  if (!error_.empty()) return TlsStatus::kError;
  if (detached_) return detachedWrite(pieces);
  if (pieces.size() == 1) return write(pieces.front());
  std::vector<uint8_t> joined;
  for (const auto& piece : pieces) joined.insert(joined.end(), piece.begin(), piece.end());
  return write(joined);
}

void TlsEngine::shutdown() {
  if (!error_.empty()) return;
  if (detached_) {
    detachedShutdown();
    return;
  }
  if (proving()) {  // closing before the proof: nothing left to save, and nothing to count
    giveUp(DetachResult::kKeptUnproven);
    detachReported_ = true;
  }
  ERR_clear_error();
  (void)SSL_shutdown(ssl_);  // queues close_notify; we never wait for the peer's
  ERR_clear_error();
}

bool TlsEngine::keyUpdate(bool requestPeer) {
  if (detached_ || !error_.empty() || SSL_version(ssl_) != TLS1_3_VERSION) return false;
  ERR_clear_error();
  // Sent at once (SSL_do_handshake), so that the engine is not left "in init" until a write.
  const bool ok = SSL_key_update(ssl_, requestPeer ? SSL_KEY_UPDATE_REQUESTED
                                                   : SSL_KEY_UPDATE_NOT_REQUESTED) == 1 &&
                  SSL_do_handshake(ssl_) == 1;
  ERR_clear_error();
  releaseIdleBuffers();
  return ok;
}

size_t TlsEngine::pendingOutputSize() const {
  return bio_->out.size();
}

std::vector<uint8_t> TlsEngine::takeOutput() {
  std::vector<uint8_t> output;
  output.swap(bio_->out);  // leaves the engine's buffer empty with no capacity
  releaseIdleBuffers();
  return output;
}

void TlsEngine::releaseIdleBuffers() {
  if (bio_->inPos == bio_->in.size() && bio_->in.capacity() != 0) {
    std::vector<uint8_t>().swap(bio_->in);
    bio_->inPos = 0;
  }
  if (bio_->out.empty() && bio_->out.capacity() != 0) returnPooledBuffer(bio_->out);
  if (detached_ && detached_->heldPos == detached_->held.size() &&
      detached_->held.capacity() != 0) {
    std::vector<uint8_t>().swap(detached_->held);
    detached_->heldPos = 0;
  }
}

bool TlsEngine::sessionReused() const {
  if (detached_) return detached_->sessionReused;
  return SSL_session_reused(ssl_) == 1;
}

std::string_view TlsEngine::alpn() const {
  if (detached_) return detached_->alpn;
  const unsigned char* data = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl_, &data, &len);
  if (data == nullptr) return {};
  return {reinterpret_cast<const char*>(data), len};
}

std::string_view TlsEngine::serverName() const {
  if (detached_) return detached_->serverName;
  const char* name = SSL_get_servername(ssl_, TLSEXT_NAMETYPE_host_name);
  return name != nullptr ? std::string_view(name) : std::string_view();
}

size_t TlsEngine::pendingPlaintext() const {
  if (detached_) return detached_->held.size() - detached_->heldPos;
  const int n = SSL_pending(ssl_);
  return n > 0 ? static_cast<size_t>(n) : 0;
}

TlsStatus TlsEngine::fail(int ret, const char* what) {
  const int err = SSL_get_error(ssl_, ret);  // before draining: it peeks at the queue
  std::string text = std::string("tls ") + what + " failed (ssl error " + std::to_string(err) + ")";
  const std::string detail = opensslErrorText();
  if (!detail.empty()) text += ": " + detail;
  const long verify = SSL_get_verify_result(ssl_);
  if (verify != X509_V_OK) {
    text += "; certificate verify failed: ";
    text += X509_verify_cert_error_string(verify);
  }
  error_ = std::move(text);
  return TlsStatus::kError;
}

}  // namespace ot::tls
