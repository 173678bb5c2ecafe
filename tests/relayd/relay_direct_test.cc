// Direct mode through a real Relay (no controld: attaches are authorized from the cached record):
// a record whose origin carries a direct address on 127.0.26.2 makes the relay dial it; a fake
// origin on a thread of its own accepts each connection and speaks first as otunnel would (TLS
// client to the API domain, the WebSocket upgrade, attach with its origin and credential). The
// bridges attach through the normal inbound path and count as the dialer's links; one that closes
// is redialed; a record without the address closes them.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/bridge_control.h"
#include "common/crypto.h"
#include "common/websocket_frame.h"
#include "relayd/relay.h"
#include "tests/relayd/manual_relay_loop.h"
#include "tests/unit/test_certs.h"

using ot::relayd::ControlClientOptions;
using ot::relayd::Relay;

namespace {

constexpr const char* kOriginHost = "127.0.26.2";
constexpr const char* kDirectDomain = "tunnels.test";

std::string sha256Bytes(const std::string& text) {
  const auto digest = ot::crypto::sha256(text);
  return std::string(digest.begin(), digest.end());
}

// otunnel's side of one direct link, blocking, on the origin's thread.
struct OriginLink {
  int fd = -1;
  SSL* ssl = nullptr;
};

bool readExactly(SSL* ssl, uint8_t* out, size_t size) {
  size_t got = 0;
  while (got < size) {
    const int n = SSL_read(ssl, out + got, static_cast<int>(size - got));
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

// TLS client (SNI: the API domain, the relay's certificate verified against the test CA), the
// upgrade, attach; true once the relay answered `attached`.
bool speakFirst(SSL_CTX* ctx, int fd, OriginLink& link, const char* serverName) {
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  link.fd = fd;
  link.ssl = SSL_new(ctx);
  SSL_set_fd(link.ssl, fd);
  SSL_ctrl(link.ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
           const_cast<char*>(serverName));  // SSL_set_tlsext_host_name, without its C cast
  SSL_set1_host(link.ssl, kDirectDomain);
  if (SSL_connect(link.ssl) != 1) return false;
  const std::string upgrade =
      "GET /api/tunnel/t1/bridge HTTP/1.1\r\nHost: tunnels.test\r\nUpgrade: websocket\r\n"
      "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
      "Sec-WebSocket-Version: 13\r\n\r\n";
  if (SSL_write(link.ssl, upgrade.data(), static_cast<int>(upgrade.size())) <= 0) return false;
  std::string head;
  while (head.find("\r\n\r\n") == std::string::npos && head.size() < 4096) {
    uint8_t byte = 0;
    if (!readExactly(link.ssl, &byte, 1)) return false;
    head.push_back(static_cast<char>(byte));
  }
  if (head.rfind("HTTP/1.1 101", 0) != 0) return false;
  ot::bridge::AttachRequest attach;
  attach.token = "oc_alpha_1";
  attach.origin = "alpha";
  const auto frame =
      ot::ws::buildText(ot::bridge::serializeAttach(attach), ot::ws::MaskKey{1, 2, 3, 4});
  if (SSL_write(link.ssl, frame.data(), static_cast<int>(frame.size())) <= 0) return false;
  uint8_t header[2];
  if (!readExactly(link.ssl, header, 2)) return false;
  size_t length = header[1] & 0x7F;
  if (length == 126) {
    uint8_t ext[2];
    if (!readExactly(link.ssl, ext, 2)) return false;
    length = (size_t{ext[0]} << 8) | ext[1];
  }
  std::string payload(length, '\0');
  if (!readExactly(link.ssl, reinterpret_cast<uint8_t*>(payload.data()), length)) return false;
  return payload.find("\"attached\"") != std::string::npos;
}

// The origin: listens on 127.0.26.2 and answers every connection the relay makes.
struct FakeDirectOrigin {
  int listenFd = -1;
  uint16_t port = 0;
  SSL_CTX* ctx = nullptr;
  std::atomic<int> accepted{0};
  std::atomic<int> attached{0};
  std::atomic<bool> stop{false};
  const char* serverName = kDirectDomain;  // the SNI it sends (set before the relay dials)
  std::mutex mutex;
  std::vector<OriginLink> links;  // attached, open
  std::thread thread;

  explicit FakeDirectOrigin(const std::string& caPem) {
    listenFd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listenFd >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    REQUIRE(::inet_pton(AF_INET, kOriginHost, &address.sin_addr) == 1);
    REQUIRE(::bind(listenFd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listenFd, 16) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(listenFd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port = ntohs(address.sin_port);
    ctx = SSL_CTX_new(TLS_client_method());
    REQUIRE(ctx != nullptr);
    BIO* bio = BIO_new_mem_buf(caPem.data(), static_cast<int>(caPem.size()));
    X509* ca = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    BIO_free(bio);
    REQUIRE(ca != nullptr);
    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca);
    X509_free(ca);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    thread = std::thread([this] { run(); });
  }
  ~FakeDirectOrigin() {
    stop = true;
    thread.join();
    for (auto& link : links) closeLink(link);
    ::close(listenFd);
    SSL_CTX_free(ctx);
  }
  FakeDirectOrigin(const FakeDirectOrigin&) = delete;
  FakeDirectOrigin& operator=(const FakeDirectOrigin&) = delete;

  static void closeLink(OriginLink& link) {
    if (link.ssl != nullptr) SSL_free(link.ssl);
    if (link.fd >= 0) ::close(link.fd);
    link = {};
  }
  void run() {
    while (!stop) {
      pollfd poller{listenFd, POLLIN, 0};
      if (::poll(&poller, 1, 20) <= 0) continue;
      const int fd = ::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      ++accepted;
      OriginLink link;
      if (speakFirst(ctx, fd, link, serverName)) {
        std::lock_guard lock(mutex);
        links.push_back(link);
        ++attached;
      } else {
        closeLink(link);
      }
    }
  }
  // Closes one attached link, as an origin restarting would.
  void dropOne() {
    std::lock_guard lock(mutex);
    REQUIRE(!links.empty());
    closeLink(links.front());
    links.erase(links.begin());
  }
  [[nodiscard]] std::string address() const {
    return std::string(kOriginHost) + ":" + std::to_string(port);
  }
};

ot::relayd::v1::TunnelRecord recordOf(uint64_t revision, const std::string& directAddress,
                                      uint32_t links) {
  ot::relayd::v1::TunnelRecord record;
  record.set_tunnel_id("t1");
  record.set_revision(revision);
  record.set_token_sha256(sha256Bytes("tk_owner"));
  record.set_cert_ready(true);
  auto* origin = record.add_origins();
  origin->set_name("alpha");
  origin->set_credential_sha256(sha256Bytes("oc_alpha_1"));
  origin->set_direct_address(directAddress);
  origin->set_direct_links(links);
  return record;
}

struct DirectRelayRig : ot::test::ManualRelayLoop {
  ot::test::TestCert ca = ot::test::makeCa("Direct Test CA");
  ot::test::TestCert leaf = ot::test::makeLeaf(ca, kDirectDomain);
  std::optional<Relay> relay;

  DirectRelayRig() {
    config.domain = kDirectDomain;
    config.directAllowPrivate = true;
    ControlClientOptions control;
    control.socketPath = "/nonexistent/control.sock";
    control.machineId = "A";
    relay.emplace(*context, control);
    ot::relayd::v1::ApiCertificate certificate;
    certificate.set_certificate_chain_pem(leaf.certPem + ca.certPem);
    certificate.set_private_key_pem(leaf.keyPem);
    relay->onApiCertificate(certificate);
    REQUIRE(relay->apiContext());
    relay->directDialer().start();
  }
  ~DirectRelayRig() {
    relay->stop();
    context->resetAllStreams();
    for (int i = 0; i < 200; ++i) uv_run(&loop, UV_RUN_NOWAIT);
    relay.reset();
  }
  DirectRelayRig(const DirectRelayRig&) = delete;
  DirectRelayRig& operator=(const DirectRelayRig&) = delete;

  // Runs the loop (real time, at most 10 s) until `done`.
  bool runUntil(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      uv_run(&loop, UV_RUN_NOWAIT);
      if (done()) return true;
      ::usleep(1'000);
    }
    return false;
  }
  // Runs the loop for `ms` of real time (nothing to wait for: lets whatever would happen happen).
  void spin(int ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < until) {
      uv_run(&loop, UV_RUN_NOWAIT);
      ::usleep(1'000);
    }
  }
  // The manual clock moves on; the dialer looks at it.
  void advance(uint64_t ms) {
    clock->advance(static_cast<int64_t>(ms));
    relay->directDialer().pump();
  }
};

}  // namespace

TEST_CASE_FIXTURE(DirectRelayRig, "relay direct mode: dialed links attach, are redialed, close") {
  FakeDirectOrigin origin(ca.certPem);
  relay->storeRecord(recordOf(1, origin.address(), 2));
  const auto& counters = relay->directDialer().counters();
  REQUIRE(runUntil([&] { return counters.up == 2 && origin.attached == 2; }));
  CHECK(counters.started == 2);
  CHECK(relay->table().bridgeCountOf("t1") == 2);
  CHECK(relay->bridgeCount() == 2);
  // No more while both are up.
  advance(2'000);
  spin(300);
  CHECK(counters.started == 2);

  // The origin drops one: the relay sees the bridge go and dials again.
  origin.dropOne();
  REQUIRE(runUntil([&] { return counters.up == 1; }));
  advance(1'000);
  REQUIRE(runUntil([&] { return counters.up == 2 && origin.attached == 3; }));
  CHECK(counters.started == 3);
  CHECK(relay->table().bridgeCountOf("t1") == 2);

  // The direct address removed: the dialed bridges close and nothing is dialed.
  relay->storeRecord(recordOf(2, "", 0));
  REQUIRE(runUntil([&] { return relay->table().bridgeCountOf("t1") == 0; }));
  CHECK(counters.up == 0);
  advance(5'000);
  spin(300);
  CHECK(counters.started == 3);
  CHECK(origin.accepted == 3);
}

TEST_CASE_FIXTURE(DirectRelayRig, "relay direct mode: a dialed socket never carries a visitor") {
  FakeDirectOrigin origin(ca.certPem);
  origin.serverName = "t1.tunnels.test";  // a tunnel hostname, not the API domain
  relay->storeRecord(recordOf(1, origin.address(), 1));
  const auto& counters = relay->directDialer().counters();
  REQUIRE(runUntil([&] {
    return counters.failedBy(ot::relayd::DialFailure::kClosed) == 1 && origin.accepted == 1;
  }));
  CHECK(counters.up == 0);
  CHECK(origin.attached == 0);
  CHECK(relay->table().bridgeCountOf("t1") == 0);
}

TEST_CASE_FIXTURE(DirectRelayRig, "relay direct mode: the drain stops dialing") {
  FakeDirectOrigin origin(ca.certPem);
  relay->storeRecord(recordOf(1, origin.address(), 2));
  const auto& counters = relay->directDialer().counters();
  REQUIRE(runUntil([&] { return counters.up == 2 && origin.attached == 2; }));
  relay->startDrain();
  origin.dropOne();
  REQUIRE(runUntil([&] { return counters.up <= 1; }));
  advance(5'000);
  spin(300);
  CHECK(counters.started == 2);
  CHECK(origin.accepted == 2);
}
