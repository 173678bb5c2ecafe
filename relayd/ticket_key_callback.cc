// useTicketKeys (ticket_keys.h): OpenSSL's ticket key callback on a TicketKeyStore. Tickets are
// AES-256-CBC + HMAC-SHA256 (OpenSSL's own ticket format), the key named in each ticket's clear
// prefix. It runs wherever the handshake runs (relayd's loop or a handshake worker): the store
// locks.
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstring>
#include <ctime>
#include <memory>
#include <optional>
#include <utility>

#include "relayd/ticket_keys.h"

namespace ot::relayd {
namespace {

using StoreHandle = std::shared_ptr<TicketKeyStore>;

int storeIndex() {
  static const int index = SSL_CTX_get_ex_new_index(
      0, nullptr, nullptr, nullptr, [](void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
        delete static_cast<StoreHandle*>(ptr);
      });
  return index;
}

bool useMacKey(EVP_MAC_CTX* mac, const TicketKey& key) {
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_octet_string(
          OSSL_MAC_PARAM_KEY, const_cast<uint8_t*>(key.hmacKey.data()), key.hmacKey.size()),
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>("SHA256"), 0),
      OSSL_PARAM_construct_end()};
  return EVP_MAC_CTX_set_params(mac, params) == 1;
}

// enc 1: seal a new ticket (1 done, 0 no ticket, -1 error). enc 0: open one (1 done, 2 done and
// reissue under the current key, 0 unknown key: a full handshake, -1 error).
int ticketKeyCallback(SSL* ssl, unsigned char keyName[16], unsigned char* iv,
                      EVP_CIPHER_CTX* cipher, EVP_MAC_CTX* mac, int enc) {
  auto* handle = static_cast<StoreHandle*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), storeIndex()));
  if (handle == nullptr || !*handle) return 0;
  TicketKeyStore& store = **handle;
  const EVP_CIPHER* aes = EVP_aes_256_cbc();
  if (enc == 1) {
    const std::optional<TicketKey> key = store.sealing(std::time(nullptr));
    if (!key) return 0;
    if (RAND_bytes(iv, EVP_CIPHER_get_iv_length(aes)) != 1) return -1;
    std::memcpy(keyName, key->name.data(), key->name.size());
    if (EVP_EncryptInit_ex(cipher, aes, nullptr, key->aesKey.data(), iv) != 1) return -1;
    return useMacKey(mac, *key) ? 1 : -1;
  }
  const std::optional<TicketKeyStore::Found> found =
      store.find(std::span<const uint8_t>(keyName, 16));
  if (!found) return 0;
  if (EVP_DecryptInit_ex(cipher, aes, nullptr, found->key.aesKey.data(), iv) != 1) return -1;
  if (!useMacKey(mac, found->key)) return -1;
  return found->newest ? 1 : 2;
}

}  // namespace

void useTicketKeys(SSL_CTX* ctx, std::shared_ptr<TicketKeyStore> store) {
  auto* handle = new StoreHandle(std::move(store));
  if (SSL_CTX_set_ex_data(ctx, storeIndex(), handle) != 1) {
    delete handle;
    return;  // the context keeps OpenSSL's own per-context keys
  }
  SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticketKeyCallback);
  SSL_CTX_set_num_tickets(ctx, 1);
  SSL_CTX_set_timeout(ctx, static_cast<long>(kTicketLifetimeSeconds));
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
}

}  // namespace ot::relayd
