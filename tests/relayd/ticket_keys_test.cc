// The TLS ticket key store (relayd/ticket_keys.h): made on the first start, loaded after, rotated,
// a damaged or unusable file replaced without failing; and through real OpenSSL handshakes: a
// client holding a ticket resumes against a store loaded from the same file (a restart), and does
// a full handshake against another.
#include "relayd/ticket_keys.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "common/tls_engine.h"
#include "common/tls_sessions.h"
#include "tests/unit/test_certs.h"

namespace fs = std::filesystem;
using ot::relayd::kTicketKeyRotationSeconds;
using ot::relayd::kTicketLifetimeSeconds;
using ot::relayd::TicketKeyStore;
using ot::tls::TlsEngine;
using ot::tls::TlsStatus;

namespace {

constexpr int64_t kT0 = 1'800'000'000;

struct TempDir {
  fs::path path = fs::temp_directory_path() /
                  ("ot-ticket-keys-" + std::to_string(::getpid()) + "-" + std::to_string(next()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  static int next() {
    static int n = 0;
    return ++n;
  }
  [[nodiscard]] fs::path file() const { return path / ot::relayd::kTicketKeysFile; }
};

std::string readAll(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

unsigned modeOf(const fs::path& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 0777;
}

// ---- handshakes over memory ------------------------------------------------------------------

struct Pki {
  ot::test::TestCert ca = ot::test::makeCa("Ticket Test CA");
  ot::test::TestCert leaf = ot::test::makeLeaf(ca, "api.example.test", 2);
  ot::test::CaFile caFile{ca, "ticket-keys"};
};

const Pki& pki() {
  static const Pki instance;
  return instance;
}

ot::tls::SslCtxPtr serverWith(std::shared_ptr<TicketKeyStore> store) {
  auto ctx = ot::tls::makeServerContext(pki().leaf.certPem + pki().ca.certPem, pki().leaf.keyPem,
                                        {"http/1.1"});
  REQUIRE(ctx.ok());
  ot::relayd::useTicketKeys(ctx.value().get(), std::move(store));
  return ctx.value();
}

ot::tls::SslCtxPtr resumingClient() {
  auto ctx = ot::tls::makeClientContext(pki().caFile.string(), {"http/1.1"});
  REQUIRE(ctx.ok());
  ot::tls::keepClientSessions(ctx.value().get());
  return ctx.value();
}

bool transfer(TlsEngine& from, TlsEngine& to) {
  if (from.pendingOutputSize() == 0) return false;
  to.feed(from.takeOutput());
  return true;
}

// One connection: the handshake, then the client reads what follows (the server's ticket).
// Answers whether the server saw a resumed handshake.
bool connectOnce(const ot::tls::SslCtxPtr& client, const ot::tls::SslCtxPtr& server) {
  auto c = TlsEngine::client(client, "api.example.test");
  auto s = TlsEngine::server(server);
  REQUIRE(c != nullptr);
  REQUIRE(s != nullptr);
  TlsStatus cs = TlsStatus::kWantRead;
  TlsStatus ss = TlsStatus::kWantRead;
  for (int round = 0; round < 20; ++round) {
    cs = c->handshake();
    bool moved = transfer(*c, *s);
    ss = s->handshake();
    moved = transfer(*s, *c) || moved;
    if (!moved) break;
  }
  REQUIRE(cs == TlsStatus::kOk);
  REQUIRE(ss == TlsStatus::kOk);
  std::array<uint8_t, 64> sink{};
  (void)c->read(sink);  // takes the NewSessionTicket
  CHECK(c->sessionReused() == s->sessionReused());
  return s->sessionReused();
}

}  // namespace

TEST_CASE("ticket keys: the first start makes a private file, the next start loads it") {
  TempDir dir;
  auto first = TicketKeyStore::open(dir.path.string(), kT0);
  REQUIRE(first->keys().size() == 1);
  REQUIRE(fs::exists(dir.file()));
  CHECK(modeOf(dir.file()) == 0600);
  auto again = TicketKeyStore::open(dir.path.string(), kT0 + 60);
  REQUIRE(again->keys().size() == 1);
  CHECK(again->keys().front().name == first->keys().front().name);
  CHECK(again->keys().front().aesKey == first->keys().front().aesKey);
  CHECK(again->keys().front().hmacKey == first->keys().front().hmacKey);
}

TEST_CASE("ticket keys: the state directory is made when missing") {
  TempDir dir;
  const fs::path nested = dir.path / "a" / "b";
  auto store = TicketKeyStore::open(nested.string(), kT0);
  CHECK(store->keys().size() == 1);
  CHECK(fs::exists(nested / ot::relayd::kTicketKeysFile));
}

TEST_CASE("ticket keys: rotation seals with a new key, old ones open until their tickets expire") {
  TempDir dir;
  auto store = TicketKeyStore::open(dir.path.string(), kT0);
  const auto firstName = store->keys().front().name;
  CHECK(store->sealing(kT0 + kTicketKeyRotationSeconds - 1)->name == firstName);

  const auto second = store->sealing(kT0 + kTicketKeyRotationSeconds);
  REQUIRE(second.has_value());
  CHECK(second->name != firstName);
  CHECK(store->keys().size() == 2);
  CHECK(store->find(firstName).has_value());  // its tickets still open

  // Saved: a restart sees both, newest first.
  auto reloaded = TicketKeyStore::open(dir.path.string(), kT0 + kTicketKeyRotationSeconds + 1);
  REQUIRE(reloaded->keys().size() == 2);
  CHECK(reloaded->keys().front().name == second->name);
  CHECK(reloaded->find(firstName).has_value());

  // The first key's last ticket expires kTicketLifetimeSeconds after it stopped sealing.
  const int64_t firstGone = kT0 + kTicketKeyRotationSeconds + kTicketLifetimeSeconds;
  auto later = TicketKeyStore::open(dir.path.string(), firstGone - 1);
  CHECK(later->find(firstName).has_value());
  auto expired = TicketKeyStore::open(dir.path.string(), firstGone);
  CHECK_FALSE(expired->find(firstName).has_value());
  CHECK(expired->find(second->name).has_value());
}

TEST_CASE("ticket keys: a damaged file is replaced by fresh keys") {
  TempDir dir;
  auto original = TicketKeyStore::open(dir.path.string(), kT0);
  const auto oldName = original->keys().front().name;
  for (const std::string& damage :
       {std::string("garbage\n"), std::string(""), std::string("opentunnel-tls-ticket-keys v1\n"),
        readAll(dir.file()).substr(0, 60), readAll(dir.file()) + "1 zz\n"}) {
    CAPTURE(damage);
    std::ofstream(dir.file(), std::ios::trunc) << damage;
    auto store = TicketKeyStore::open(dir.path.string(), kT0 + 1);
    REQUIRE(store->keys().size() == 1);
    CHECK_FALSE(store->find(oldName).has_value());
    auto parsed = ot::relayd::parseTicketKeys(readAll(dir.file()));  // rewritten whole
    REQUIRE(parsed.ok());
    CHECK(parsed.value().front().name == store->keys().front().name);
    std::ofstream(dir.file(), std::ios::trunc) << ot::relayd::formatTicketKeys(original->keys());
  }
}

TEST_CASE("ticket keys: an unreadable, unwritable path still gives keys (in memory)") {
  TempDir dir;
  fs::create_directories(dir.file());  // a directory where the file should be
  auto store = TicketKeyStore::open(dir.path.string(), kT0);
  REQUIRE(store->keys().size() == 1);
  REQUIRE(store->sealing(kT0).has_value());
  CHECK(fs::is_directory(dir.file()));
}

TEST_CASE("ticket keys: a file readable by others is made private") {
  TempDir dir;
  (void)TicketKeyStore::open(dir.path.string(), kT0);
  fs::permissions(dir.file(), fs::perms::owner_read | fs::perms::owner_write |
                                  fs::perms::group_read | fs::perms::others_read);
  (void)TicketKeyStore::open(dir.path.string(), kT0 + 1);
  CHECK(modeOf(dir.file()) == 0600);
}

TEST_CASE("ticket keys: parse and format round trip; limits") {
  auto a = ot::relayd::makeTicketKey(kT0);
  auto b = ot::relayd::makeTicketKey(kT0 + 5);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const std::vector<ot::relayd::TicketKey> keys{*a, *b};
  auto parsed = ot::relayd::parseTicketKeys(ot::relayd::formatTicketKeys(keys));
  REQUIRE(parsed.ok());
  REQUIRE(parsed.value().size() == 2);
  CHECK(parsed.value()[0].name == b->name);  // newest first
  CHECK(parsed.value()[1].hmacKey == a->hmacKey);
  std::vector<ot::relayd::TicketKey> many(ot::relayd::kMaxTicketKeys + 1, *a);
  CHECK_FALSE(ot::relayd::parseTicketKeys(ot::relayd::formatTicketKeys(many)).ok());
}

TEST_CASE("ticket keys: a client resumes across a restart with the same file, not with another") {
  TempDir dir;
  TempDir otherDir;
  // OpenSSL seals and checks ticket ages by the real clock: the stores live at the real time too.
  const int64_t now = std::time(nullptr);
  auto client = resumingClient();
  auto server = serverWith(TicketKeyStore::open(dir.path.string(), now));
  CHECK_FALSE(connectOnce(client, server));  // the first: full, and a ticket kept
  REQUIRE(ot::tls::holdsSession(client.get(), "api.example.test"));
  CHECK(connectOnce(client, server));  // resumed

  // "Restart": a new context and store loaded from the same directory.
  auto restarted = serverWith(TicketKeyStore::open(dir.path.string(), now + 10));
  CHECK(connectOnce(client, restarted));

  // Another relayd (other keys): a full handshake, which still succeeds.
  auto other = serverWith(TicketKeyStore::open(otherDir.path.string(), now));
  CHECK_FALSE(connectOnce(client, other));
  // ... and its new ticket is the one held now.
  CHECK(connectOnce(client, other));
}
