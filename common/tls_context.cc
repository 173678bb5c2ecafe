// The TLS contexts of tls_engine.h: a server context on one certificate chain and key with the
// server's ALPN preference, a client context on a trust store, both with our protocol versions and
// cipher suites; and a chain's leaf fingerprint.
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <climits>
#include <cstring>
#include <utility>

#include "common/crypto.h"
#include "common/openssl_errors.h"
#include "common/openssl_ptr.h"
#include "common/tls_engine.h"

namespace ot::tls {
namespace {

constexpr const char* kTls13Suites =
    "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384";
// TLS 1.2: forward-secret AEAD suites only.
constexpr const char* kTls12Ciphers = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL";

Error invalid(std::string what) {
  std::string detail = opensslErrorText();
  if (!detail.empty()) what += ": " + detail;
  return Error{ErrorKind::kInvalid, std::move(what)};
}

// ---- ALPN -------------------------------------------------------------------------------------

// Wire format: each protocol prefixed by its length (1..255 bytes).
Result<std::string> alpnWire(const std::vector<std::string>& protocols) {
  std::string wire;
  for (const auto& protocol : protocols) {
    if (protocol.empty() || protocol.size() > 255) {
      return Error{ErrorKind::kInvalid, "ALPN protocol name must be 1..255 bytes"};
    }
    wire.push_back(static_cast<char>(protocol.size()));
    wire += protocol;
  }
  return wire;
}

// The server's preference list (wire format) lives in the context's ex_data, freed with it.
int alpnIndex() {
  static const int index = SSL_CTX_get_ex_new_index(
      0, nullptr, nullptr, nullptr, [](void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
        delete static_cast<std::string*>(ptr);
      });
  return index;
}

// Server order wins: the first server protocol the client also offers.
int selectAlpn(SSL*, const unsigned char** out, unsigned char* outLen, const unsigned char* in,
               unsigned int inLen, void* arg) {
  const auto* server = static_cast<const std::string*>(arg);
  if (server == nullptr) return SSL_TLSEXT_ERR_NOACK;
  size_t s = 0;
  while (s < server->size()) {
    const auto sLen = static_cast<size_t>(static_cast<unsigned char>((*server)[s]));
    const std::string_view want(server->data() + s + 1, sLen);
    size_t c = 0;
    while (c < inLen) {
      const size_t cLen = in[c];
      if (c + 1 + cLen > inLen) break;  // malformed client list: stop scanning it
      if (cLen == want.size() && std::memcmp(in + c + 1, want.data(), cLen) == 0) {
        *out = in + c + 1;
        *outLen = static_cast<unsigned char>(cLen);
        return SSL_TLSEXT_ERR_OK;
      }
      c += 1 + cLen;
    }
    s += 1 + sLen;
  }
  return SSL_TLSEXT_ERR_NOACK;
}

BioPtr memBuf(std::string_view pem) {
  if (pem.size() > static_cast<size_t>(INT_MAX)) return nullptr;
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Settings both sides share.
void commonSettings(SSL_CTX* ctx) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
}

}  // namespace

// ---- contexts ---------------------------------------------------------------------------------

Result<SslCtxPtr> makeServerContext(std::string_view certificateChainPem,
                                    std::string_view privateKeyPem, std::vector<std::string> alpn) {
  ERR_clear_error();
  auto wire = alpnWire(alpn);
  if (!wire) return wire.error();
  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()), SslCtxDeleter{});
  if (!ctx) return invalid("SSL_CTX_new failed");
  commonSettings(ctx.get());
  // Stateless tickets only: no per-session state kept in the context.
  SSL_CTX_set_session_cache_mode(ctx.get(), SSL_SESS_CACHE_OFF);
  // Hands the TLS 1.3 traffic secrets to engines made with keepTrafficSecrets (detach); a no-op
  // for the rest. Nothing is written anywhere.
  SSL_CTX_set_keylog_callback(ctx.get(), TlsEngine::onKeylog);
  if (SSL_CTX_set_ciphersuites(ctx.get(), kTls13Suites) != 1 ||
      SSL_CTX_set_cipher_list(ctx.get(), kTls12Ciphers) != 1) {
    return invalid("cannot set cipher suites");
  }

  BioPtr chainBio = memBuf(certificateChainPem);
  if (!chainBio) return invalid("certificate chain too large or out of memory");
  X509Ptr leaf(PEM_read_bio_X509(chainBio.get(), nullptr, nullptr, nullptr));
  if (!leaf) return invalid("cannot read the leaf certificate");
  if (SSL_CTX_use_certificate(ctx.get(), leaf.get()) != 1) return invalid("cannot use certificate");
  while (X509Ptr extra{PEM_read_bio_X509(chainBio.get(), nullptr, nullptr, nullptr)}) {
    if (SSL_CTX_add_extra_chain_cert(ctx.get(), extra.get()) != 1) {
      return invalid("cannot add chain certificate");
    }
    (void)extra.release();  // owned by the context now
  }
  ERR_clear_error();  // the loop ends on "no start line"

  BioPtr keyBio = memBuf(privateKeyPem);
  if (!keyBio) return invalid("private key too large or out of memory");
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(keyBio.get(), nullptr, nullptr, nullptr));
  if (!key) return invalid("cannot read the private key");
  if (SSL_CTX_use_PrivateKey(ctx.get(), key.get()) != 1) {
    return invalid("private key does not match the certificate");
  }
  if (SSL_CTX_check_private_key(ctx.get()) != 1) {
    return invalid("private key does not match the certificate");
  }

  if (!wire->empty()) {
    auto* prefs = new std::string(std::move(*wire));
    if (SSL_CTX_set_ex_data(ctx.get(), alpnIndex(), prefs) != 1) {
      delete prefs;
      return invalid("cannot store ALPN preferences");
    }
    SSL_CTX_set_alpn_select_cb(ctx.get(), selectAlpn, prefs);
  }
  return ctx;
}

Result<SslCtxPtr> makeClientContext(const std::string& caFile, std::vector<std::string> alpn) {
  ERR_clear_error();
  auto wire = alpnWire(alpn);
  if (!wire) return wire.error();
  SslCtxPtr ctx(SSL_CTX_new(TLS_client_method()), SslCtxDeleter{});
  if (!ctx) return invalid("SSL_CTX_new failed");
  commonSettings(ctx.get());
  if (SSL_CTX_set_ciphersuites(ctx.get(), kTls13Suites) != 1) {
    return invalid("cannot set cipher suites");
  }
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  // As on the server: the secrets go to client engines made with keepTrafficSecrets (otunnel's
  // bridge, so that it can detach); a no-op for the rest. Nothing is written anywhere.
  SSL_CTX_set_keylog_callback(ctx.get(), TlsEngine::onKeylog);
  if (caFile.empty()) {
    if (SSL_CTX_set_default_verify_paths(ctx.get()) != 1) {
      return invalid("cannot load the default trust roots");
    }
  } else if (SSL_CTX_load_verify_locations(ctx.get(), caFile.c_str(), nullptr) != 1) {
    return invalid("cannot load CA file " + caFile);
  }
  if (!wire->empty()) {
    // Note the inverted convention: 0 means success here.
    if (SSL_CTX_set_alpn_protos(ctx.get(), reinterpret_cast<const unsigned char*>(wire->data()),
                                static_cast<unsigned int>(wire->size())) != 0) {
      return invalid("cannot set ALPN protocols");
    }
  }
  return ctx;
}

std::string leafFingerprint(std::string_view certificateChainPem) {
  ERR_clear_error();
  BioPtr bio = memBuf(certificateChainPem);
  if (!bio) return "";
  X509Ptr leaf(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (!leaf) {
    ERR_clear_error();
    return "";
  }
  const int len = i2d_X509(leaf.get(), nullptr);
  if (len <= 0) {
    ERR_clear_error();
    return "";
  }
  std::vector<uint8_t> der(static_cast<size_t>(len));
  unsigned char* p = der.data();
  if (i2d_X509(leaf.get(), &p) != len) {
    ERR_clear_error();
    return "";
  }
  return crypto::toHex(crypto::sha256(der));
}

}  // namespace ot::tls
