// ChalltestsrvDns against the real pebble-challtestsrv, started here on free ports: the TXT
// answers its DNS server gives after creates and deletes, read with a minimal DNS client below.
// Skipped (with a message) only when the binary is not installed.
#include "controld/acme/dns_challtestsrv.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace ot::controld {
namespace {

constexpr const char* kValueA = "dGhpcyBpcyBhIGNoYWxsZW5nZSB2YWx1ZSBvZiA0Mw_";
constexpr const char* kValueB = "c2Vjb25kIGNoYWxsZW5nZSB2YWx1ZSBvZiA0MyBjaC-";

std::optional<std::string> findBinary(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::filesystem::path candidate = std::filesystem::path(dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return std::nullopt;
}

// A port free for both TCP and UDP right now (challtestsrv's DNS binds both), other than `taken`.
// The kernel may hand the same free port out twice in a row; given to both the DNS and the
// management listener, the management one fails to bind, the readiness check is answered by the
// DNS server's TCP listener, and the first HTTP call gets an empty reply (seen once in CI).
uint16_t freePort(uint16_t taken = 0) {
  for (int tries = 0; tries < 50; ++tries) {
    const int tcp = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(tcp >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(tcp, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(tcp, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    const int udp = ::socket(AF_INET, SOCK_DGRAM, 0);
    REQUIRE(udp >= 0);
    const bool udpFree = ::bind(udp, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    ::close(udp);
    ::close(tcp);
    if (udpFree && ntohs(addr.sin_port) != taken) return ntohs(addr.sin_port);
  }
  FAIL("no free port");
  return 0;
}

bool acceptsTcp(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// A TXT query for `name` (one question, recursion desired).
std::vector<uint8_t> txtQuery(uint16_t id, const std::string& name) {
  std::vector<uint8_t> out = {static_cast<uint8_t>(id >> 8),
                              static_cast<uint8_t>(id & 0xff),
                              0x01,
                              0x00,
                              0,
                              1,
                              0,
                              0,
                              0,
                              0,
                              0,
                              0};
  std::stringstream labels(name);
  std::string label;
  while (std::getline(labels, label, '.')) {
    if (label.empty()) continue;
    out.push_back(static_cast<uint8_t>(label.size()));
    out.insert(out.end(), label.begin(), label.end());
  }
  out.insert(out.end(), {0, 0, 16, 0, 1});
  return out;
}

// Skips a (possibly compressed) name; false when it runs past the end.
bool skipName(const std::vector<uint8_t>& msg, size_t& pos) {
  while (pos < msg.size()) {
    const uint8_t len = msg[pos];
    if ((len & 0xc0) == 0xc0) {
      pos += 2;
      return pos <= msg.size();
    }
    pos += 1u + len;
    if (len == 0) return pos <= msg.size();
  }
  return false;
}

uint16_t read16(const std::vector<uint8_t>& msg, size_t pos) {
  return static_cast<uint16_t>((msg[pos] << 8) | msg[pos + 1]);
}

// The TXT strings in the answer section of the reply to `query`.
std::multiset<std::string> txtAnswers(uint16_t port, const std::string& name) {
  static uint16_t nextId = 0x4100;
  const uint16_t id = ++nextId;
  const std::vector<uint8_t> query = txtQuery(id, name);
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  REQUIRE(fd >= 0);
  timeval timeout{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  REQUIRE(::sendto(fd, query.data(), query.size(), 0, reinterpret_cast<sockaddr*>(&addr),
                   sizeof addr) == static_cast<ssize_t>(query.size()));
  std::vector<uint8_t> msg(4096);
  const ssize_t got = ::recv(fd, msg.data(), msg.size(), 0);
  ::close(fd);
  REQUIRE_MESSAGE(got >= 12, "no DNS answer from challtestsrv");
  msg.resize(static_cast<size_t>(got));
  REQUIRE(read16(msg, 0) == id);
  REQUIRE((msg[2] & 0x80) != 0);  // a response
  REQUIRE((msg[3] & 0x0f) == 0);  // NOERROR
  const uint16_t questions = read16(msg, 4);
  const uint16_t answers = read16(msg, 6);
  size_t pos = 12;
  for (uint16_t i = 0; i < questions; ++i) {
    REQUIRE(skipName(msg, pos));
    pos += 4;
  }
  std::multiset<std::string> out;
  for (uint16_t i = 0; i < answers; ++i) {
    REQUIRE(skipName(msg, pos));
    REQUIRE(pos + 10 <= msg.size());
    const uint16_t type = read16(msg, pos);
    const uint16_t rdlength = read16(msg, pos + 8);
    pos += 10;
    REQUIRE(pos + rdlength <= msg.size());
    if (type == 16) {
      std::string text;
      for (size_t at = pos; at < pos + rdlength;) {
        const uint8_t len = msg[at];
        text.append(reinterpret_cast<const char*>(&msg[at + 1]), len);
        at += 1u + len;
      }
      out.insert(text);
    }
    pos += rdlength;
  }
  return out;
}

// pebble-challtestsrv on free ports for one test; stopped (SIGTERM, then reaped) at the end.
class Challtestsrv {
 public:
  explicit Challtestsrv(const std::string& binary)
      : dnsPort_(freePort()), mgmtPort_(freePort(dnsPort_)) {
    const std::string dns = "127.0.0.1:" + std::to_string(dnsPort_);
    const std::string mgmt = "127.0.0.1:" + std::to_string(mgmtPort_);
    std::vector<std::string> args = {binary, "-dns01",   dns, "-management", mgmt, "-http01",
                                     "",     "-https01", "",  "-tlsalpn01",  ""};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    const int spawned = posix_spawn(&pid_, binary.c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE(spawned == 0);
    // Ready once both listeners accept connections (DNS listens on TCP too).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!(acceptsTcp(mgmtPort_) && acceptsTcp(dnsPort_))) {
      int status = 0;
      REQUIRE_MESSAGE(::waitpid(pid_, &status, WNOHANG) == 0, "pebble-challtestsrv exited");
      REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline,
                      "pebble-challtestsrv did not start listening within 10 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~Challtestsrv() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
  }
  Challtestsrv(const Challtestsrv&) = delete;
  Challtestsrv& operator=(const Challtestsrv&) = delete;

  [[nodiscard]] uint16_t dnsPort() const { return dnsPort_; }
  [[nodiscard]] std::string managementUrl() const {
    return "http://127.0.0.1:" + std::to_string(mgmtPort_);
  }

 private:
  uint16_t dnsPort_;
  uint16_t mgmtPort_;
  pid_t pid_ = -1;
};

TEST_CASE("dns challtestsrv: TXT answers follow creates and deletes, host and wildcard together") {
  const auto binary = findBinary("pebble-challtestsrv");
  // deploy/install-deps.sh installs it (package pebble): missing is a failure, not a skip.
  REQUIRE_MESSAGE(binary.has_value(), "pebble-challtestsrv is not installed");
  Challtestsrv server(*binary);
  ChalltestsrvDns dns(server.managementUrl());
  CHECK(std::string(dns.name()) == "challtestsrv");
  const std::string name = "_acme-challenge.abc.tunnel.test";
  CHECK(txtAnswers(server.dnsPort(), name).empty());

  // The hostname's and the wildcard's values under one name: both are answered.
  auto host = dns.createTxt(name, kValueA);
  REQUIRE_MESSAGE(host.ok(), (host.ok() ? "" : host.error().message));
  CHECK(host->id.empty());
  CHECK(host->name == name);
  CHECK(host->value == kValueA);
  auto wildcard = dns.createTxt(name + ".", kValueB);  // a trailing dot is the same name
  REQUIRE(wildcard.ok());
  CHECK(wildcard->name == name);
  CHECK(txtAnswers(server.dnsPort(), name) == std::multiset<std::string>{kValueA, kValueB});
  CHECK(txtAnswers(server.dnsPort(), "_acme-challenge.other.tunnel.test").empty());

  // challtestsrv clears a whole name; the provider puts back the value not deleted.
  REQUIRE(dns.deleteTxt(*host).ok());
  CHECK(txtAnswers(server.dnsPort(), name) == std::multiset<std::string>{kValueB});
  REQUIRE(dns.deleteTxt(*wildcard).ok());
  CHECK(txtAnswers(server.dnsPort(), name).empty());
  // Deleting again (already gone) is fine.
  CHECK(dns.deleteTxt(*wildcard).ok());

  // No listing in the test DNS: an empty list, not an error.
  auto listed = dns.listChallengeRecords("tunnel.test");
  REQUIRE(listed.ok());
  CHECK(listed->empty());
}

TEST_CASE("dns challtestsrv: a management API that is not there is unavailable") {
  const uint16_t port = freePort();
  ChalltestsrvDns dns("http://127.0.0.1:" + std::to_string(port), 2000);
  auto created = dns.createTxt("_acme-challenge.abc.tunnel.test", kValueA);
  REQUIRE_FALSE(created.ok());
  CHECK(created.error().kind == ErrorKind::kUnavailable);
}

}  // namespace
}  // namespace ot::controld
