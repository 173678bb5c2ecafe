// TLS over memory buffers: the socket I/O stays with the caller's event loop (libuv), OpenSSL only
// transforms bytes. One TlsEngine per connection, used by one thread. Both relayd (the API domain)
// and otunnel (its link to the relay, and each visitor's TLS) use it.
//
// Idle engines hold no buffers: contexts set SSL_MODE_RELEASE_BUFFERS, and the engine's own
// input/output buffers are released whenever they are empty after a call (releaseIdleBuffers).
#pragma once

#include <openssl/ssl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ot::tls {

struct SslCtxDeleter {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};
using SslCtxPtr = std::shared_ptr<SSL_CTX>;  // shared: hot-swapped while handshakes hold the old

// A server context with one certificate chain and key (PEM; the chain starts with the leaf).
// `alpn` is the server's preference order (e.g. {"h2", "http/1.1"}); the first protocol the
// client also offers wins; a client offering none of them gets no ALPN (the handshake proceeds).
// TLS 1.2 and 1.3, SSL_MODE_RELEASE_BUFFERS, no session cache state per connection beyond
// OpenSSL's stateless tickets.
[[nodiscard]] Result<SslCtxPtr> makeServerContext(std::string_view certificateChainPem,
                                                  std::string_view privateKeyPem,
                                                  std::vector<std::string> alpn);

// A client context that verifies the peer's chain. `caFile` empty: the system's default roots;
// otherwise only the roots in that PEM file. `alpn` is offered in order (may be empty).
[[nodiscard]] Result<SslCtxPtr> makeClientContext(const std::string& caFile,
                                                  std::vector<std::string> alpn);

// Lowercase hex SHA-256 of the first certificate's DER in a PEM chain ("" when unreadable).
[[nodiscard]] std::string leafFingerprint(std::string_view certificateChainPem);

enum class TlsStatus : uint8_t {
  kOk,        // progress made (or nothing to do)
  kWantRead,  // needs more ciphertext from the peer
  kClosed,    // the peer sent close_notify (reads return EOF from now on)
  kError,     // fatal: errorText() says why; send pendingOutput() (an alert) and close
};

// What became of a requested detach (TlsEngine::releaseHandshakeState), reported once.
enum class DetachResult : uint8_t {
  kNone,           // not decided yet (or never requested)
  kDetached,       // OpenSSL's state is freed; the record layer runs the connection
  kKeptTls12,      // TLS 1.2: OpenSSL keeps the connection
  kKeptSuite,      // a TLS 1.3 suite the record layer does not run
  kKeptNoSecrets,  // the traffic secrets never arrived (a context without the keylog hook)
  kKeptUnproven,   // a sequence number could not be proven (e.g. a KeyUpdate came first)
};
[[nodiscard]] const char* detachResultName(DetachResult result);  // "detached", "kept_tls12", ...

struct ReadResult {
  size_t bytes = 0;  // plaintext copied into the caller's span
  TlsStatus status = TlsStatus::kOk;
};

class TlsEngine {
 public:
  // A server-side engine on `ctx` (kept alive by the engine). With `keepTrafficSecrets` it keeps
  // the TLS 1.3 traffic secrets the context's keylog hook hands over (never written anywhere;
  // cleansed when freed), so that releaseHandshakeState() can detach it later.
  [[nodiscard]] static std::unique_ptr<TlsEngine> server(SslCtxPtr ctx,
                                                         bool keepTrafficSecrets = false);
  // A client-side engine: sends `serverName` as SNI and, when `verifyName`, checks the peer's
  // certificate against that name (in addition to the context's chain verification). On a
  // context that keeps sessions (tls_sessions.h) it offers the one held for `sessionKey` (empty:
  // `serverName`) and files the tickets it receives under it. `keepTrafficSecrets` as for
  // server(): on a context from makeClientContext, releaseHandshakeState() can detach it too.
  [[nodiscard]] static std::unique_ptr<TlsEngine> client(SslCtxPtr ctx,
                                                         const std::string& serverName,
                                                         bool verifyName = true,
                                                         const std::string& sessionKey = {},
                                                         bool keepTrafficSecrets = false);
  ~TlsEngine();
  TlsEngine(const TlsEngine&) = delete;
  TlsEngine& operator=(const TlsEngine&) = delete;

  // Ciphertext that arrived from the peer. Always takes all of it (it is queued inside).
  void feed(std::span<const uint8_t> ciphertext);
  // Ciphertext that arrived from the peer, read in place: the engine's calls read it straight
  // from the caller's buffer (after anything fed or lent before), which must stay valid and
  // unchanged until keepUnread(). keepUnread() copies inside only what they did not consume
  // (a record cut at the end of a read, or records left while plaintext was not wanted), and
  // ends the loan. feed() and a new lend() end a pending loan the same way first. Saves copying
  // every socket read into the engine's queue.
  void lend(std::span<const uint8_t> ciphertext);
  void keepUnread();

  // Advances the handshake. kOk once complete (also on later calls), kWantRead while it needs
  // more input, kError on failure. Output to send may be pending either way.
  [[nodiscard]] TlsStatus handshake();
  [[nodiscard]] bool handshakeDone() const;

  // Decrypts into `out`. bytes == 0 with kWantRead: nothing available yet; kClosed: the peer
  // finished; kError: fatal. Call again while bytes == out.size() (more may be buffered).
  [[nodiscard]] ReadResult read(std::span<uint8_t> out);

  // Encrypts all of `plaintext` (after the handshake). kError if the engine failed.
  [[nodiscard]] TlsStatus write(std::span<const uint8_t> plaintext);
  // Asks for the cache lines a read or a write reads `stage` pointers away from this engine (0:
  // the engine; 1: its buffers and detached state; 2: the record layer) without waiting for
  // them: relayd calls it a stage at a time for a batch of idle bridges about to be pinged or to
  // read their pongs (relayd/timer_wheel.h, Prefetch). Reads only. Not while a handshake step
  // runs elsewhere.
  void prefetch(unsigned stage) const;
  // write() of the pieces one after another, as one write. Detached, the records are sealed
  // straight from the pieces; on OpenSSL they are joined first (one copy).
  [[nodiscard]] TlsStatus writeGather(std::span<const std::span<const uint8_t>> pieces);

  // Queues a close_notify alert.
  void shutdown();

  // Sends a TLS 1.3 KeyUpdate with the next write (SSL_key_update); with `requestPeer` the peer
  // must update its keys too. False on TLS 1.2, before the handshake, or once detached.
  [[nodiscard]] bool keyUpdate(bool requestPeer);

  // Ciphertext to send to the peer, produced by handshake/read/write/shutdown.
  [[nodiscard]] size_t pendingOutputSize() const;
  // Moves the pending ciphertext out (the engine's buffer is left empty).
  [[nodiscard]] std::vector<uint8_t> takeOutput();

  // Frees internal buffers that are empty (called by the engine after each operation too).
  void releaseIdleBuffers();

  [[nodiscard]] std::string_view alpn() const;  // negotiated protocol, "" when none
  // The handshake resumed a session (a ticket) instead of a full one.
  [[nodiscard]] bool sessionReused() const;
  [[nodiscard]] std::string_view serverName() const;  // SNI seen by a server engine, "" when none
  [[nodiscard]] const std::string& errorText() const { return error_; }
  // Bytes of plaintext OpenSSL holds decrypted but not yet read (SSL_pending).
  [[nodiscard]] size_t pendingPlaintext() const;

  // Asks to drop OpenSSL's per-connection state (the SSL object, ~14 KiB) once the handshake is
  // done: a TLS 1.3 engine (server or client) made with keepTrafficSecrets, on one of the three
  // AEAD suites,
  // switches to its own record layer (tls13_record.h) as soon as both directions' sequence
  // numbers are proven: our next write is sealed by OpenSSL and compared with our own sealing
  // under candidate numbers, and the next complete record from the peer must authenticate under
  // the counted number before OpenSSL would read it. The switch happens at a record boundary
  // where OpenSSL holds no plaintext, no partial record and no pending KeyUpdate. Every call
  // keeps its meaning across the switch. Anything else keeps OpenSSL (takeDetachResult says why).
  // Detached, a client engine ignores the server's NewSessionTicket messages (a client asks once
  // the tickets sent with the handshake have been read, so it has filed them) and seals its
  // writes straight from the caller's plaintext into the output (no copy into a record buffer).
  void releaseHandshakeState();
  [[nodiscard]] bool detached() const { return detached_ != nullptr; }
  // The outcome of releaseHandshakeState once decided, reported once (kNone otherwise).
  [[nodiscard]] DetachResult takeDetachResult();

  // The keylog hook makeServerContext and makeClientContext install (SSL_CTX_set_keylog_callback):
  // hands CLIENT_TRAFFIC_SECRET_0 / SERVER_TRAFFIC_SECRET_0 to an engine that keeps them.
  static void onKeylog(const SSL* ssl, const char* line);

 private:
  TlsEngine(SslCtxPtr ctx, SSL* ssl);
  [[nodiscard]] TlsStatus fail(int ret, const char* what);

  // tls_engine_detach.cc
  void onHandshakeComplete();
  bool ensureCandidateLayer();
  void proveWrite(size_t outStart, std::span<const uint8_t> plaintext);
  void tryDetach();
  void giveUp(DetachResult result);
  [[nodiscard]] std::span<const uint8_t> frontRecord();
  [[nodiscard]] ReadResult detachedRead(std::span<uint8_t> out, ReadResult result);
  [[nodiscard]] TlsStatus detachedWrite(std::span<const std::span<const uint8_t>> pieces);
  void detachedShutdown();
  [[nodiscard]] bool proving() const;

  struct BioState;
  struct Capture;
  struct Detached;
  SslCtxPtr ctx_;
  SSL* ssl_;
  std::unique_ptr<BioState> bio_;
  std::string error_;
  std::unique_ptr<Capture> capture_;    // the secrets and the proof, until decided
  std::unique_ptr<Detached> detached_;  // after the switch (ssl_ is then null)
  DetachResult verdict_ = DetachResult::kNone;
  bool detachRequested_ = false;
  bool detachReported_ = false;
};

}  // namespace ot::tls
