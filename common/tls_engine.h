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

struct ReadResult {
  size_t bytes = 0;  // plaintext copied into the caller's span
  TlsStatus status = TlsStatus::kOk;
};

class TlsEngine {
 public:
  // A server-side engine on `ctx` (kept alive by the engine).
  [[nodiscard]] static std::unique_ptr<TlsEngine> server(SslCtxPtr ctx);
  // A client-side engine: sends `serverName` as SNI and, when `verifyName`, checks the peer's
  // certificate against that name (in addition to the context's chain verification). On a
  // context that keeps sessions (tls_sessions.h) it offers the one held for `sessionKey` (empty:
  // `serverName`) and files the tickets it receives under it.
  [[nodiscard]] static std::unique_ptr<TlsEngine> client(SslCtxPtr ctx,
                                                         const std::string& serverName,
                                                         bool verifyName = true,
                                                         const std::string& sessionKey = {});
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

  // Queues a close_notify alert.
  void shutdown();

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

 private:
  TlsEngine(SslCtxPtr ctx, SSL* ssl);
  [[nodiscard]] TlsStatus fail(int ret, const char* what);

  struct BioState;
  SslCtxPtr ctx_;
  SSL* ssl_;
  std::unique_ptr<BioState> bio_;
  std::string error_;
};

}  // namespace ot::tls
