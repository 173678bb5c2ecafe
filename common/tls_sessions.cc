#include "common/tls_sessions.h"

#include <mutex>
#include <unordered_map>
#include <utility>

namespace ot::tls {
namespace {

// One entry per key (server name), never erased (its address is what each SSL carries in ex_data).
struct Held {
  SSL_SESSION* session = nullptr;
};

struct SessionHolder {
  std::mutex mutex;  // otunnel's loops may share one context
  std::unordered_map<std::string, Held> byName;

  ~SessionHolder() {
    for (auto& [name, held] : byName) {
      if (held.session != nullptr) SSL_SESSION_free(held.session);
    }
  }
};

int holderIndex() {
  static const int index = SSL_CTX_get_ex_new_index(
      0, nullptr, nullptr, nullptr, [](void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
        delete static_cast<SessionHolder*>(ptr);
      });
  return index;
}

// Which entry of the holder a connection files its tickets under.
int entryIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

SessionHolder* holderOf(SSL_CTX* ctx) {
  return static_cast<SessionHolder*>(SSL_CTX_get_ex_data(ctx, holderIndex()));
}

// A ticket arrived: a copy of it replaces the one held for the connection's name. A copy, never
// the connection's own session: OpenSSL marks a connection's session not resumable when the
// connection is freed without a close_notify (a relay restart ends bridges that way), and the
// held ticket must survive exactly that.
int onNewSession(SSL* ssl, SSL_SESSION* session) {
  SessionHolder* holder = holderOf(SSL_get_SSL_CTX(ssl));
  auto* held = static_cast<Held*>(SSL_get_ex_data(ssl, entryIndex()));
  if (holder == nullptr || held == nullptr || SSL_SESSION_is_resumable(session) != 1) return 0;
  SSL_SESSION* copy = SSL_SESSION_dup(session);
  if (copy == nullptr) return 0;
  SSL_SESSION* old = nullptr;
  {
    std::lock_guard lock(holder->mutex);
    old = std::exchange(held->session, copy);
  }
  if (old != nullptr) SSL_SESSION_free(old);
  return 0;  // the connection keeps its own reference
}

}  // namespace

void keepClientSessions(SSL_CTX* ctx) {
  if (holderOf(ctx) != nullptr) return;
  auto* holder = new SessionHolder();
  if (SSL_CTX_set_ex_data(ctx, holderIndex(), holder) != 1) {
    delete holder;
    return;
  }
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(ctx, onNewSession);
}

void offerHeldSession(SSL* ssl, const std::string& key) {
  SessionHolder* holder = holderOf(SSL_get_SSL_CTX(ssl));
  if (holder == nullptr) return;
  std::lock_guard lock(holder->mutex);
  Held& held = holder->byName[key];
  if (SSL_set_ex_data(ssl, entryIndex(), &held) != 1) return;
  if (held.session == nullptr) return;
  // The connection gets a copy, for the reason onNewSession keeps one.
  SSL_SESSION* copy = SSL_SESSION_dup(held.session);
  if (copy == nullptr) return;
  (void)SSL_set_session(ssl, copy);
  SSL_SESSION_free(copy);  // the connection holds its own reference
}

bool holdsSession(SSL_CTX* ctx, const std::string& key) {
  SessionHolder* holder = holderOf(ctx);
  if (holder == nullptr) return false;
  std::lock_guard lock(holder->mutex);
  auto it = holder->byName.find(key);
  return it != holder->byName.end() && it->second.session != nullptr;
}

}  // namespace ot::tls
