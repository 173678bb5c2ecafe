// TlsEngine's detached mode (tls_engine.h, releaseHandshakeState): the traffic secrets from the
// keylog hook, the proof of both sequence numbers while OpenSSL still runs the connection, the
// switch, and the record path afterwards (tls13_record.h).
#include <openssl/crypto.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>

#include "common/byte_buffer_pool.h"
#include "common/prefetch.h"
#include "common/tls_engine.h"
#include "common/tls_engine_state.h"

namespace ot::tls {
namespace {

// A TLS 1.3 write probe may follow this many records OpenSSL wrote before counting began (the
// session tickets written as the handshake completed; OpenSSL sends 2 by default).
constexpr uint64_t kTicketWindow = 16;

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "LABEL <client random hex> <secret hex>": the secret's bytes into `out`, their count (0: bad).
size_t parseSecret(std::string_view rest, uint8_t* out) {
  const size_t space = rest.find(' ');
  if (space == std::string_view::npos) return 0;
  const std::string_view hex = rest.substr(space + 1);
  if (hex.empty() || hex.size() % 2 != 0 || hex.size() / 2 > tls13::kMaxSecretSize) return 0;
  for (size_t i = 0; i < hex.size() / 2; ++i) {
    const int hi = hexValue(hex[2 * i]);
    const int lo = hexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return 0;
    out[i] = static_cast<uint8_t>(hi * 16 + lo);
  }
  return hex.size() / 2;
}

}  // namespace

int engineIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

void RecordCounter::pass(std::span<const uint8_t> bytes) {
  size_t i = 0;
  while (i < bytes.size()) {
    if (bodyLeft > 0) {
      const size_t n = std::min<size_t>(bodyLeft, bytes.size() - i);
      bodyLeft -= static_cast<uint32_t>(n);
      i += n;
      if (bodyLeft == 0) ++records;
      continue;
    }
    header[headerFill++] = bytes[i++];
    if (headerFill == sizeof(header)) {
      headerFill = 0;
      bodyLeft = (uint32_t{header[3]} << 8) | header[4];
      if (bodyLeft == 0) ++records;
    }
  }
}

TlsEngine::Capture::~Capture() {
  OPENSSL_cleanse(clientSecret, sizeof(clientSecret));
  OPENSSL_cleanse(serverSecret, sizeof(serverSecret));
}

const char* detachResultName(DetachResult result) {
  switch (result) {
    case DetachResult::kNone:
      return "none";
    case DetachResult::kDetached:
      return "detached";
    case DetachResult::kKeptTls12:
      return "kept_tls12";
    case DetachResult::kKeptSuite:
      return "kept_suite";
    case DetachResult::kKeptNoSecrets:
      return "kept_no_secrets";
    case DetachResult::kKeptUnproven:
      return "kept_unproven";
  }
  return "none";
}

void TlsEngine::onKeylog(const SSL* ssl, const char* line) {
  auto* engine = static_cast<TlsEngine*>(SSL_get_ex_data(ssl, engineIndex()));
  if (engine == nullptr || line == nullptr) return;
  const std::string_view text(line);
  constexpr std::string_view kClient = "CLIENT_TRAFFIC_SECRET_0 ";
  constexpr std::string_view kServer = "SERVER_TRAFFIC_SECRET_0 ";
  const bool client = text.starts_with(kClient);
  if (!client && !text.starts_with(kServer)) return;
  if (!engine->capture_) engine->capture_ = std::make_unique<Capture>();
  Capture& capture = *engine->capture_;
  if (client) {
    capture.clientSize =
        static_cast<uint8_t>(parseSecret(text.substr(kClient.size()), capture.clientSecret));
  } else {
    capture.serverSize =
        static_cast<uint8_t>(parseSecret(text.substr(kServer.size()), capture.serverSecret));
  }
}

bool TlsEngine::proving() const {
  return detachRequested_ && capture_ && bio_->counting;
}

void TlsEngine::giveUp(DetachResult result) {
  capture_.reset();  // cleanses the secrets
  bio_->counting.reset();
  if (verdict_ == DetachResult::kNone) verdict_ = result;
}

DetachResult TlsEngine::takeDetachResult() {
  if (!detachRequested_ || detachReported_ || verdict_ == DetachResult::kNone)
    return DetachResult::kNone;
  detachReported_ = true;
  return verdict_;
}

// The handshake just completed on an engine that keeps secrets: decide what can be detached and
// start counting records from here (a record boundary: OpenSSL reads records exactly).
void TlsEngine::onHandshakeComplete() {
  if (SSL_version(ssl_) != TLS1_3_VERSION) {
    giveUp(DetachResult::kKeptTls12);
    return;
  }
  const SSL_CIPHER* cipher = SSL_get_current_cipher(ssl_);
  if (cipher == nullptr || !tls13::suiteFromId(SSL_CIPHER_get_protocol_id(cipher))) {
    giveUp(DetachResult::kKeptSuite);
    return;
  }
  if (!capture_ || capture_->clientSize == 0 || capture_->serverSize == 0) {
    giveUp(DetachResult::kKeptNoSecrets);
    return;
  }
  if (SSL_has_pending(ssl_) != 0) {
    giveUp(DetachResult::kKeptUnproven);
    return;
  }
  bio_->counting = std::make_unique<MemoryQueues::Counters>();
}

void TlsEngine::releaseHandshakeState() {
  if (detachRequested_ || detached_ || ssl_ == nullptr) return;
  detachRequested_ = true;
  if (verdict_ != DetachResult::kNone) return;  // decided at the handshake's end
  if (SSL_get_ex_data(ssl_, engineIndex()) == nullptr) {
    verdict_ = DetachResult::kKeptNoSecrets;
    return;
  }
  if (!handshakeDone()) {  // asked too early: nothing proven can follow
    giveUp(DetachResult::kKeptUnproven);
    return;
  }
  if (!ensureCandidateLayer()) giveUp(DetachResult::kKeptUnproven);
}

bool TlsEngine::ensureCandidateLayer() {
  if (!capture_) return false;
  if (capture_->layer) return capture_->layer->valid();
  const auto suite = tls13::suiteFromId(SSL_CIPHER_get_protocol_id(SSL_get_current_cipher(ssl_)));
  if (!suite) return false;
  // A server reads what the client sealed and writes under the server's secret; a client the
  // other way round.
  const std::span<const uint8_t> client(capture_->clientSecret, capture_->clientSize);
  const std::span<const uint8_t> server(capture_->serverSecret, capture_->serverSize);
  const bool isServer = SSL_is_server(ssl_) == 1;
  capture_->layer = std::make_unique<tls13::RecordLayer>(*suite, isServer ? client : server, 0,
                                                         isServer ? server : client, 0);
  if (!isServer) capture_->layer->ignoreSessionTickets();
  return capture_->layer->valid();
}

// OpenSSL just sealed `plaintext` into out[outStart:]: the first of its records must equal our
// own sealing of the first 2^14 bytes under some sequence number near the counted one.
void TlsEngine::proveWrite(size_t outStart, std::span<const uint8_t> plaintext) {
  if (!ensureCandidateLayer()) {
    giveUp(DetachResult::kKeptUnproven);
    return;
  }
  const std::span<const uint8_t> written(bio_->out.data() + outStart, bio_->out.size() - outStart);
  const size_t first = tls13::completeRecordSize(written);
  const uint64_t records = (plaintext.size() + tls13::kMaxPlaintext - 1) / tls13::kMaxPlaintext;
  const uint64_t writes = bio_->counting->writes.records;
  if (first == 0 || records > writes) {
    giveUp(DetachResult::kKeptUnproven);
    return;
  }
  const auto chunk = plaintext.first(std::min(plaintext.size(), tls13::kMaxPlaintext));
  const uint64_t before = writes - records;  // counted records before this write
  for (uint64_t seq = before; seq <= before + kTicketWindow; ++seq) {
    if (capture_->layer->sealMatches(seq, chunk, written.first(first))) {
      capture_->writeProven = true;
      capture_->writeNext = seq + records;
      capture_->writesAtProof = writes;
      return;
    }
  }
  giveUp(DetachResult::kKeptUnproven);
}

std::span<const uint8_t> TlsEngine::frontRecord() {
  if (bio_->inPos < bio_->in.size()) {
    std::span<const uint8_t> queued(bio_->in.data() + bio_->inPos, bio_->in.size() - bio_->inPos);
    size_t size = tls13::completeRecordSize(queued);
    if (size == 0 && !bio_->lent.empty()) {  // cut between the queue and the loan: join them
      keepUnread();
      queued = {bio_->in.data() + bio_->inPos, bio_->in.size() - bio_->inPos};
      size = tls13::completeRecordSize(queued);
    }
    return queued.first(size);
  }
  return bio_->lent.first(tls13::completeRecordSize(bio_->lent));
}

// Called from read() before OpenSSL reads another record: switch when everything is proven.
void TlsEngine::tryDetach() {
  if (!capture_->writeProven) return;
  const MemoryQueues::Counters& counters = *bio_->counting;
  if (SSL_has_pending(ssl_) != 0 || SSL_pending(ssl_) > 0 || !counters.reads.atBoundary() ||
      SSL_in_init(ssl_) != 0 || SSL_get_key_update_type(ssl_) != SSL_KEY_UPDATE_NONE)
    return;
  const std::span<const uint8_t> record = frontRecord();
  if (record.empty()) return;  // wait for a whole record
  const uint64_t counted = counters.reads.records;
  if (!capture_->layer->opensWith(counted, record)) {
    giveUp(DetachResult::kKeptUnproven);
    return;
  }
  auto detached = std::make_unique<Detached>();
  detached->alpn = std::string(alpn());
  detached->serverName = std::string(serverName());
  detached->sessionReused = sessionReused();
  detached->layer = std::move(capture_->layer);
  detached->layer->setSequenceNumbers(
      counted, capture_->writeNext + (counters.writes.records - capture_->writesAtProof));
  capture_.reset();
  bio_->counting.reset();
  SSL_free(ssl_);  // its BIO (ours) goes with it; the queues stay with the engine
  ssl_ = nullptr;
  ctx_.reset();
  detached_ = std::move(detached);
  verdict_ = DetachResult::kDetached;
}

ReadResult TlsEngine::detachedRead(std::span<uint8_t> out, ReadResult result) {
  Detached& d = *detached_;
  auto& in = bio_->in;
  while (result.bytes < out.size()) {
    if (d.heldPos < d.held.size()) {  // a record that did not fit last time
      const size_t n = std::min(d.held.size() - d.heldPos, out.size() - result.bytes);
      std::memcpy(out.data() + result.bytes, d.held.data() + d.heldPos, n);
      d.heldPos += n;
      result.bytes += n;
      continue;
    }
    const bool fromQueue = bio_->inPos < in.size();
    if (fromQueue && bio_->lent.size() > 0 &&
        tls13::completeRecordSize({in.data() + bio_->inPos, in.size() - bio_->inPos}) == 0)
      keepUnread();  // a record cut between the queue and the loan: join them
    const std::span<const uint8_t> input =
        fromQueue ? std::span<const uint8_t>(in.data() + bio_->inPos, in.size() - bio_->inPos)
                  : bio_->lent;
    auto opened = d.layer->open(input, out.subspan(result.bytes), bio_->out);
    if (opened.status == tls13::RecordLayer::OpenStatus::kNeedRoom && opened.produced == 0 &&
        opened.consumed == 0) {
      // The next record's plaintext does not fit: open it into the held buffer instead.
      d.held.resize(tls13::kMaxCiphertext);
      d.heldPos = 0;
      const size_t size = tls13::completeRecordSize(input);
      opened = d.layer->open(input.first(size), d.held, bio_->out);
      d.held.resize(opened.produced);
      opened.produced = 0;  // handed out from `held` at the top of the loop
      if (opened.status == tls13::RecordLayer::OpenStatus::kOk) {
        opened.status = tls13::RecordLayer::OpenStatus::kNeedRoom;  // more records may follow
      }
    }
    result.bytes += opened.produced;
    if (fromQueue) {
      bio_->inPos += opened.consumed;
      if (bio_->inPos == in.size()) {
        in.clear();
        bio_->inPos = 0;
      }
    } else {
      bio_->lent = bio_->lent.subspan(opened.consumed);
    }
    if (opened.status == tls13::RecordLayer::OpenStatus::kClosed) {
      result.status = TlsStatus::kClosed;
      break;
    }
    if (opened.status == tls13::RecordLayer::OpenStatus::kError) {
      error_ = d.layer->errorText();
      if (d.layer->peerAlert() >= 0) error_ += " (" + std::to_string(d.layer->peerAlert()) + ")";
      result.status = TlsStatus::kError;
      break;
    }
    if (opened.status == tls13::RecordLayer::OpenStatus::kOk) {
      // Every whole record queued is open: the loan follows the queue (a record cut between
      // them is joined at the top).
      if (fromQueue && opened.consumed > 0 && !bio_->lent.empty()) continue;
      result.status = TlsStatus::kWantRead;
      break;
    }
    // kNeedRoom: `out` is full, or the next record goes to the held buffer.
  }
  releaseIdleBuffers();
  return result;
}

void TlsEngine::prefetch(unsigned stage) const {
  switch (stage) {
    case 0:
      prefetchLine(this);
      prefetchLine(&detached_);
      return;
    case 1:
      prefetchLine(bio_.get());  // the input queue and its position, the loan
      prefetchLine(&bio_->out);
      if (detached_) {
        prefetchLine(detached_.get());
        prefetchLine(&detached_->held);
      }
      return;
    case 2:
      if (detached_ && detached_->layer) detached_->layer->prefetch();
      return;
    default:
      return;
  }
}

TlsStatus TlsEngine::detachedWrite(std::span<const std::span<const uint8_t>> pieces) {
  TlsStatus status = TlsStatus::kOk;
  if (bio_->out.capacity() == 0) {
    // A small write (a ping, a pong, a frame of control) seals into a buffer the thread kept:
    // relayd seals hundreds of them in one tick (common/byte_buffer_pool.h).
    size_t total = 0;
    for (const auto& piece : pieces) total += piece.size();
    if (const size_t sealed = total + tls13::kRecordOverhead; sealed <= kMaxPooledBufferBytes)
      bio_->out = takePooledBuffer(sealed);
  }
  if (!detached_->layer->sealGather(pieces, bio_->out)) {
    error_ = detached_->layer->errorText();
    status = TlsStatus::kError;
  }
  releaseIdleBuffers();
  return status;
}

void TlsEngine::detachedShutdown() {
  detached_->layer->sealAlert(tls13::AlertCode::kCloseNotify, bio_->out);
}

}  // namespace ot::tls
