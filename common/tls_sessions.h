// Client-side TLS session resumption: a client context that keeps, in memory, the newest session
// ticket each server name (or finer key) sent, and offers it on the next connection to that name,
// so the next handshake is a resumed one (no certificate sent, signed or verified). otunnel's relay
// context and the load tool's use it; nothing is written anywhere, and no session cache is kept
// inside OpenSSL (one ticket per name, replaced by each newer one).
#pragma once

#include <openssl/ssl.h>

#include <cstddef>
#include <string>

namespace ot::tls {

// Makes `ctx` (a client context, before its first connection) keep sessions per server name.
void keepClientSessions(SSL_CTX* ctx);

// On a context that keeps sessions: offers on `ssl` the session held under `key` (if any) and
// files the tickets `ssl` receives under it. `key` is the server name (otunnel: one ticket per
// relay host), or any finer key (the load tool: one per bridge, each standing for an otunnel of
// its own). Does nothing on other contexts. TlsEngine::client calls it.
void offerHeldSession(SSL* ssl, const std::string& key);

// Whether `ctx` holds a resumable session under `key`.
[[nodiscard]] bool holdsSession(SSL_CTX* ctx, const std::string& key);

}  // namespace ot::tls
