// ot_tls_memory_bench: what an idle API-domain TLS connection keeps on relayd's heap, measured
// rather than believed (docs/capacity.md, "Memory per idle bridge"). Built with everything else,
// never run by CI: it prints numbers and checks nothing.
//
// The process plays relayd's side only: N server TlsEngines on a real server context
// (tls::makeServerContext, an EC P-256 leaf like the one controld issues for the API domain, ALPN
// h2 and http/1.1), each taken through what a bridge does before it idles: the TLS 1.3
// handshake (its session tickets included), an HTTP upgrade request read, a 101 and a WebSocket
// frame written. The clients run in a forked child over a socketpair, so their memory is not in
// the figures and the server's transient handshake allocations interleave with its long-lived
// ones as in relayd (`--batch` handshakes run side by side, round-robin).
//
// It prints per idle connection: OpenSSL's live bytes and allocations (counted through
// CRYPTO_set_mem_functions, set before OpenSSL allocates anything, and grouped by the allocating
// file:line), the whole heap's growth (mallinfo2: bytes in use, with glibc's per-chunk header,
// and bytes taken from the system; before and after malloc_trim), and the size of relayd's own
// per-bridge objects.
//
//   ot_tls_memory_bench [--connections 4000] [--batch 64] [--top 25] [--heap-only] [--detached]
//
// `--detached`: each server engine keeps its traffic secrets and releases its handshake state
// before the 101, as relayd's bridges do (TlsEngine::releaseHandshakeState); the client's next
// record (its `attach` message, sent in both modes) proves the read side, and the engine drops
// OpenSSL's state for the record layer (common/tls13_record.h).
//
// The accounting keeps a hash node per live OpenSSL allocation, which the mallinfo2 figures then
// include (~56 bytes per allocation): `--heap-only` leaves OpenSSL's allocator alone for clean
// heap figures (and prints no OpenSSL breakdown).
#include <malloc.h>
#include <openssl/crypto.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/allocator_tuning.h"
#include "common/tcp_stream.h"
#include "common/tls13_record.h"
#include "common/tls_engine.h"
#include "common/tls_stream.h"
#include "relayd/api_connection.h"
#include "relayd/bridge_session.h"
#include "relayd/control_mirror.h"
#include "relayd/inbound_connection.h"
#include "relayd/timer_wheel.h"
#include "relayd/tunnel_table.h"
#include "tests/unit/test_certs.h"

namespace {

using v1Bridge = ::opentunnel::control::v1::Bridge;

// ---- OpenSSL's allocations, counted by site
// ------------------------------------------------------

struct Site {
  int64_t bytes = 0;
  int64_t count = 0;
};
struct Live {
  size_t bytes;
  const char* file;
  int line;
};

// Plain malloc'd state (the counters' own map allocates through malloc, not through OpenSSL).
bool gCounting = false;
std::unordered_map<void*, Live>* gLive = nullptr;

void noteAlloc(void* ptr, const char* file, int line) {
  if (ptr == nullptr || !gCounting) return;
  (*gLive)[ptr] = Live{malloc_usable_size(ptr), file, line};
}
void noteFree(void* ptr) {
  if (ptr == nullptr || gLive == nullptr) return;
  gLive->erase(ptr);
}
void* countMalloc(size_t num, const char* file, int line) {
  void* ptr = malloc(num);
  noteAlloc(ptr, file, line);
  return ptr;
}
void* countRealloc(void* old, size_t num, const char* file, int line) {
  noteFree(old);
  void* ptr = realloc(old, num);
  if (ptr == nullptr && num != 0) {
    noteAlloc(old, file, line);  // the old block is still there
    return nullptr;
  }
  noteAlloc(ptr, file, line);
  return ptr;
}
void countFree(void* ptr, const char*, int) {
  noteFree(ptr);
  free(ptr);
}

struct Totals {
  int64_t bytes = 0;
  int64_t count = 0;
};
Totals opensslTotals() {
  Totals t;
  for (const auto& [ptr, live] : *gLive) {
    t.bytes += static_cast<int64_t>(live.bytes);
    ++t.count;
  }
  return t;
}
std::map<std::string, Site> opensslSites() {
  std::map<std::string, Site> sites;
  for (const auto& [ptr, live] : *gLive) {
    std::string file = live.file != nullptr ? live.file : "?";
    const auto slash = file.find("/ssl/") != std::string::npos      ? file.find("/ssl/")
                       : file.find("/crypto/") != std::string::npos ? file.find("/crypto/")
                                                                    : std::string::npos;
    if (slash != std::string::npos) file = file.substr(slash + 1);
    auto& site = sites[file + ":" + std::to_string(live.line)];
    site.bytes += static_cast<int64_t>(live.bytes);
    ++site.count;
  }
  return sites;
}

struct Heap {
  int64_t inUse = 0;  // uordblks: allocated chunks, headers included
  int64_t arena = 0;  // arena + hblkhd: taken from the system
  int64_t free = 0;   // fordblks: free chunks inside the heap
};
Heap heapNow() {
  const struct mallinfo2 m = mallinfo2();
  return Heap{static_cast<int64_t>(m.uordblks + m.hblkhd), static_cast<int64_t>(m.arena + m.hblkhd),
              static_cast<int64_t>(m.fordblks)};
}

// ---- the client side, in a child process
// ---------------------------------------------------------

// Frames both ways: u32 connection, u32 length, bytes.
bool writeAll(int fd, const void* data, size_t len) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (len > 0) {
    const ssize_t n = ::write(fd, p, len);
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}
bool readAll(int fd, void* data, size_t len) {
  auto* p = static_cast<uint8_t*>(data);
  while (len > 0) {
    const ssize_t n = ::read(fd, p, len);
    if (n <= 0) return false;
    p += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}
bool sendFrame(int fd, uint32_t conn, const std::vector<uint8_t>& bytes) {
  const uint32_t head[2] = {conn, static_cast<uint32_t>(bytes.size())};
  return writeAll(fd, head, sizeof head) && writeAll(fd, bytes.data(), bytes.size());
}
bool readFrame(int fd, uint32_t& conn, std::vector<uint8_t>& bytes) {
  uint32_t head[2];
  if (!readAll(fd, head, sizeof head)) return false;
  conn = head[0];
  bytes.resize(head[1]);
  return readAll(fd, bytes.data(), bytes.size());
}

constexpr const char* kApiName = "api.opentunnel.test";
constexpr const char* kUpgrade =
    "GET /api/tunnel/0123456789abcdef0123456789abcdef/bridge HTTP/1.1\r\n"
    "Host: api.opentunnel.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
    "Authorization: Bearer ot_0123456789abcdef0123456789abcdef0123456789abcdef\r\n"
    "User-Agent: otunnel/0.1\r\n\r\n";

[[noreturn]] void runClients(int fd, const std::string& caFile) {
  gCounting = false;
  auto ctx = ot::tls::makeClientContext(caFile, {"http/1.1"});
  if (!ctx) _exit(2);
  struct Client {
    std::unique_ptr<ot::tls::TlsEngine> engine;
    bool sentRequest = false;
    bool sentAttach = false;
  };
  std::unordered_map<uint32_t, Client> clients;
  uint32_t conn = 0;
  std::vector<uint8_t> in;
  std::vector<uint8_t> plain(16384);
  while (readFrame(fd, conn, in)) {
    auto& client = clients[conn];
    if (!client.engine) client.engine = ot::tls::TlsEngine::client(*ctx, kApiName);
    auto& engine = *client.engine;
    if (!in.empty()) engine.feed(in);
    if (engine.handshake() == ot::tls::TlsStatus::kError) _exit(3);
    if (engine.handshakeDone()) {
      if (!client.sentRequest) {
        client.sentRequest = true;
        const std::string_view request(kUpgrade);
        (void)engine.write({reinterpret_cast<const uint8_t*>(request.data()), request.size()});
      }
      size_t got = 0;
      for (auto r = engine.read(plain); r.bytes > 0; r = engine.read(plain)) got += r.bytes;
      if (got > 0 && !client.sentAttach) {  // the 101: a bridge's first message follows
        client.sentAttach = true;
        const std::string_view attach = "\x81\x8c\0\0\0\0{\"t\":\"attach\"}";
        (void)engine.write({reinterpret_cast<const uint8_t*>(attach.data()), attach.size()});
      }
    }
    if (!sendFrame(fd, conn, engine.takeOutput())) _exit(4);
  }
  _exit(0);
}

// ---- the server side ----------------------------------------------------------------------------

bool gDetached = false;

struct Server {
  std::unique_ptr<ot::tls::TlsEngine> engine;
  int step = 0;  // 0: send nothing yet; 1.. exchanges; done when idle
  bool idle = false;
};

// One exchange: the server's pending output to the client and the client's answer back.
bool exchange(int fd, uint32_t conn, Server& server, std::vector<uint8_t>& scratch) {
  gCounting = false;
  const bool ok = sendFrame(fd, conn, server.engine->takeOutput()) && readFrame(fd, conn, scratch);
  gCounting = true;
  if (!ok) return false;
  auto& engine = *server.engine;
  if (!scratch.empty()) engine.lend(scratch);
  if (engine.handshake() == ot::tls::TlsStatus::kError) return false;
  if (engine.handshakeDone()) {
    uint8_t plain[4096];
    const auto read = engine.read(plain);
    if (read.bytes > 0) {
      // relayd's 101 and the `attached` text message (a WebSocket frame) the client reads next.
      const std::string answer =
          "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
          "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
          "\x81\x3e{\"type\":\"attached\",\"bridge_id\":\"b-0123456789abcdef\",\"max_conns\":256}";
      if (gDetached) engine.releaseHandshakeState();  // the 101 is the write proof
      (void)engine.write({reinterpret_cast<const uint8_t*>(answer.data()), answer.size()});
      server.idle = true;
    }
  }
  engine.keepUnread();
  if (server.idle) {  // the last answer goes out; the client has nothing more to say
    gCounting = false;
    const bool sent = sendFrame(fd, conn, engine.takeOutput()) && readFrame(fd, conn, scratch);
    gCounting = true;
    if (sent && !scratch.empty()) {  // the client's attach (the read proof when detaching)
      uint8_t plain[4096];
      engine.lend(scratch);
      (void)engine.read(plain);
      engine.keepUnread();
    }
    engine.releaseIdleBuffers();
    return sent;
  }
  return true;
}

int64_t argValue(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  }
  return fallback;
}

// The control mirror's entry for one attached bridge, as Relay::bridgeAttached fills it.
v1Bridge mirrorBridge(uint64_t key) {
  v1Bridge bridge;
  bridge.set_bridge_id("br_1a2b3c4d_" + std::to_string(key));
  bridge.set_tunnel_id("zv29fvhj2ysk");
  bridge.add_routes("");
  bridge.set_origin("");
  bridge.set_profile("");
  bridge.set_max_conns(256);
  bridge.set_attached_at_unix_ms(1'796'000'000'000);
  return bridge;
}

// Heap per mirrored bridge: relayd's BridgeMirror, and the map of messages it replaced.
void printMirror() {
  constexpr uint64_t kBridges = 10'000;
  malloc_trim(0);
  Heap before = heapNow();
  {
    ot::relayd::BridgeMirror mirror;
    for (uint64_t key = 1; key <= kBridges; ++key) mirror.attached(mirrorBridge(key));
    const Heap after = heapNow();
    std::printf("control mirror per attached bridge: %.0f bytes in use (BridgeMirror)\n",
                static_cast<double>(after.inUse - before.inUse) / kBridges);
  }
  malloc_trim(0);
  before = heapNow();
  {
    std::unordered_map<std::string, v1Bridge> messages;
    for (uint64_t key = 1; key <= kBridges; ++key) {
      v1Bridge bridge = mirrorBridge(key);
      std::string id = bridge.bridge_id();
      messages.insert_or_assign(std::move(id), std::move(bridge));
    }
    const Heap after = heapNow();
    std::printf("  as a map of v1::Bridge messages (before this round): %.0f bytes\n",
                static_cast<double>(after.inUse - before.inUse) / kBridges);
  }
}

void printSizes() {
  using namespace ot;
  using namespace ot::relayd;
  std::printf("sizeof, relayd's per-bridge objects (each one heap block unless said):\n");
  std::printf("  ApiConnection          %5zu (holds tls::TlsStream, TimerEntry; owns the bridge)\n",
              sizeof(ApiConnection));
  std::printf("  BridgeSession          %5zu\n", sizeof(BridgeSession));
  std::printf("  TcpStream              %5zu (uv_tcp_t inside: %zu)\n", sizeof(TcpStream),
              sizeof(uv_tcp_t));
  std::printf("  tls::TlsStream         %5zu (inside ApiConnection)\n", sizeof(tls::TlsStream));
  std::printf("  tls::TlsEngine         %5zu + its BIO queues %zu\n", sizeof(tls::TlsEngine),
              3 * sizeof(std::vector<uint8_t>) + sizeof(size_t) + sizeof(std::span<uint8_t>) +
                  sizeof(void*));
  std::printf("  tls13::RecordLayer     %5zu (a detached engine's keys and sequence numbers)\n",
              sizeof(tls13::RecordLayer));
  std::printf("  InboundConnection      %5zu (freed once routed)\n", sizeof(InboundConnection));
  std::printf("  TimerEntry             %5zu (ApiConnection 1, BridgeSession 3)\n",
              sizeof(TimerEntry));
  std::printf("  v1::Bridge (mirror)    %5zu + its strings + the map node\n", sizeof(v1::Bridge));
  std::printf("  std::string            %5zu (heap only past 15 chars)\n", sizeof(std::string));
}

}  // namespace

int main(int argc, char** argv) {
  // Before OpenSSL allocates anything: every allocation of its own goes through the counters.
  gLive = new std::unordered_map<void*, Live>();
  bool heapOnly = false;
  for (int i = 1; i < argc; ++i) {
    heapOnly = heapOnly || std::strcmp(argv[i], "--heap-only") == 0;
    gDetached = gDetached || std::strcmp(argv[i], "--detached") == 0;
  }
  if (!heapOnly && CRYPTO_set_mem_functions(countMalloc, countRealloc, countFree) != 1) {
    std::fprintf(stderr, "CRYPTO_set_mem_functions refused (OpenSSL allocated already)\n");
    return 1;
  }
  const auto connections = static_cast<uint32_t>(argValue(argc, argv, "--connections", 4000));
  const auto batch =
      static_cast<uint32_t>(std::max<int64_t>(1, argValue(argc, argv, "--batch", 64)));
  const auto top = static_cast<size_t>(argValue(argc, argv, "--top", 25));

  auto ca = ot::test::makeCa("Bench CA");
  auto leaf = ot::test::makeLeaf(ca, kApiName);
  char caPath[] = "/tmp/ot-tls-memory-bench-XXXXXX";
  const int caFd = mkstemp(caPath);
  if (caFd < 0 || !writeAll(caFd, ca.certPem.data(), ca.certPem.size())) return 1;
  ::close(caFd);
  auto serverCtx =
      ot::tls::makeServerContext(leaf.certPem + ca.certPem, leaf.keyPem, {"h2", "http/1.1"});
  if (!serverCtx) {
    std::fprintf(stderr, "server context: %s\n", serverCtx.error().message.c_str());
    return 1;
  }
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) return 1;
  const pid_t child = fork();
  if (child == 0) {
    ::close(pair[0]);
    runClients(pair[1], caPath);
  }
  ::close(pair[1]);
  const int fd = pair[0];

  // One connection first, then the baseline: lazily made process-wide state is not per connection.
  std::vector<Server> servers(connections + 1);
  std::vector<uint8_t> scratch;
  auto runBatch = [&](uint32_t from, uint32_t to) {
    for (uint32_t i = from; i < to; ++i)
      servers[i].engine = ot::tls::TlsEngine::server(*serverCtx, gDetached);
    for (bool progress = true; progress;) {
      progress = false;
      for (uint32_t i = from; i < to; ++i) {
        if (servers[i].idle) continue;
        if (!exchange(fd, i, servers[i], scratch)) {
          std::fprintf(stderr, "connection %u failed: %s\n", i,
                       servers[i].engine->errorText().c_str());
          std::exit(1);
        }
        progress = true;
      }
    }
  };
  gCounting = true;
  runBatch(connections, connections + 1);
  malloc_trim(0);
  const Totals sslBefore = opensslTotals();
  const Heap heapBefore = heapNow();
  for (uint32_t from = 0; from < connections; from += batch) {
    runBatch(from, std::min(connections, from + batch));
  }
  const Totals sslAfter = opensslTotals();
  const Heap heapAfter = heapNow();
  // What relayd's HeapTrimmer does (its pass, timed: the loop waits for it only when it
  // allocates meanwhile).
  const auto trimStart = std::chrono::steady_clock::now();
  const bool trimmed = ot::memory::trimHeap();
  const auto trimUs = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::steady_clock::now() - trimStart)
                          .count();
  const Heap heapTrimmed = heapNow();
  ::close(fd);
  waitpid(child, nullptr, 0);
  unlink(caPath);

  const double n = connections;
  size_t detached = 0;
  for (uint32_t i = 0; i < connections; ++i)
    if (servers[i].engine->detached()) ++detached;
  std::printf(
      "%u idle server connections (TLS 1.3, %s, ALPN %s), %u handshakes at a time; "
      "%zu detached from OpenSSL\n",
      connections, "EC P-256", "h2/http/1.1", batch, detached);
  std::printf(
      "heap per connection (mallinfo2): in use %.0f bytes, taken from the system %.0f, "
      "free inside it %.0f; after malloc_trim: taken %.0f%s\n",
      static_cast<double>(heapAfter.inUse - heapBefore.inUse) / n,
      static_cast<double>(heapAfter.arena - heapBefore.arena) / n,
      static_cast<double>(heapAfter.free - heapBefore.free) / n,
      static_cast<double>(heapTrimmed.arena - heapBefore.arena) / n,
      heapOnly ? "" : " (the accounting's own hash nodes included: see --heap-only)");
  std::printf("trimHeap (malloc_trim keeping the 8 MiB top): %s, %lld us\n",
              trimmed ? "returned pages" : "nothing returned", static_cast<long long>(trimUs));
  std::printf(
      "  (free pages inside the heap count in 'taken' even after malloc_trim, which "
      "returns them with MADV_DONTNEED: RSS drops, the arena does not)\n");

  if (heapOnly) {
    printMirror();
    printSizes();
    return 0;
  }
  std::printf("OpenSSL live per connection: %.0f bytes in %.1f allocations (usable sizes)\n",
              static_cast<double>(sslAfter.bytes - sslBefore.bytes) / n,
              static_cast<double>(sslAfter.count - sslBefore.count) / n);
  std::printf("  + glibc's 8-byte chunk header each, 16-byte rounding: ~%.0f bytes of chunks\n",
              static_cast<double>(sslAfter.bytes - sslBefore.bytes +
                                  8 * (sslAfter.count - sslBefore.count)) /
                  n);
  auto sites = opensslSites();
  // Subtract what was live before the N connections: only what they added.
  std::vector<std::pair<std::string, Site>> ranked(sites.begin(), sites.end());
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& a, const auto& b) { return a.second.bytes > b.second.bytes; });
  std::printf(
      "OpenSSL live bytes by allocating site (all live, N connections + the context), per "
      "connection:\n");
  for (size_t i = 0; i < ranked.size() && i < top; ++i) {
    std::printf("  %8.1f bytes %5.2f allocs  %s\n", static_cast<double>(ranked[i].second.bytes) / n,
                static_cast<double>(ranked[i].second.count) / n, ranked[i].first.c_str());
  }
  printSizes();
  return 0;
}
