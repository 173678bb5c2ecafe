// Forwarding across the mesh, relayd's two halves against real sockets on one private loop
// (manual clock), the route tables filled by the test (controld's feed comes later):
//   - the sender (MeshForwarder) against hand-driven holders listening on 127.0.0.12 / .13: the
//     header it writes passes verifyForwardHeader and comes from this machine's internal IP
//     (127.0.0.11), the ClientHello follows; `1` -> bytes both ways; `0` -> the next holder, then
//     the visitor is rejected; a holder silent past the answer timeout -> the next holder;
//   - the receiver (InternalListener + ForwardedVisitor) on a real socket, reached from
//     127.0.0.11: accepted -> `1` before the stream with the header's visitor address as the
//     stream's peer (a recording router: no real bridge can attach in a unit test); with a real
//     Relay and no bridge here -> `0`, and never forwarded again though its table names another
//     holder; replayed, stale, misaddressed, badly signed, unlinked and wrongly placed senders
//     refused and counted; a ClientHello naming another tunnel refused.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/forward_header.h"
#include "common/tcp_stream.h"
#include "relayd/forwarded_visitor.h"
#include "relayd/internal_listener.h"
#include "relayd/mesh_forwarder.h"
#include "relayd/mesh_route_table.h"
#include "relayd/relay.h"
#include "tests/relayd/loopback_pair.h"
#include "tests/relayd/manual_relay_loop.h"

using ot::TcpStream;
using namespace ot::relayd;
namespace mesh = ot::mesh;

namespace {

const std::string kSecret(40, 's');
constexpr const char* kDomain = "tunnels.test";

using Bytes = std::vector<uint8_t>;

void put16(Bytes& out, size_t v) {
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

// A minimal TLS ClientHello record naming `name`.
Bytes helloWithSni(const std::string& name) {
  Bytes sni{0};
  put16(sni, name.size());
  sni.insert(sni.end(), name.begin(), name.end());
  Bytes ext;
  put16(ext, 0);
  put16(ext, sni.size() + 2);
  put16(ext, sni.size());
  ext.insert(ext.end(), sni.begin(), sni.end());
  Bytes body{0x03, 0x03};
  body.insert(body.end(), 32, 0xab);
  body.push_back(0);
  put16(body, 2);
  body.insert(body.end(), {0x13, 0x01, 0x01, 0x00});
  put16(body, ext.size());
  body.insert(body.end(), ext.begin(), ext.end());
  Bytes message{1, 0};
  put16(message, body.size());
  message.insert(message.end(), body.begin(), body.end());
  Bytes record{22, 3, 1};
  put16(record, message.size());
  record.insert(record.end(), message.begin(), message.end());
  return record;
}

int listenOn(const char* ip, uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  ::inet_pton(AF_INET, ip, &address.sin_addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  socklen_t length = sizeof address;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  REQUIRE(::listen(fd, 16) == 0);
  port = ntohs(address.sin_port);
  return fd;
}

// Connects from `sourceIp` to 127.0.0.1:port (blocking connect, then non-blocking).
int connectFrom(const char* sourceIp, const char* ip, uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in source{};
  source.sin_family = AF_INET;
  ::inet_pton(AF_INET, sourceIp, &source.sin_addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof source) == 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  ::inet_pton(AF_INET, ip, &address.sin_addr);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

std::string peerIpOf(int fd) {
  sockaddr_in address{};
  socklen_t length = sizeof address;
  ::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length);
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &address.sin_addr, text, sizeof text);
  return text;
}

struct MeshRig : ot::test::ManualRelayLoop {
  std::vector<int> fds;

  MeshRig() { config.domain = kDomain; }
  ~MeshRig() {
    for (TcpStream* stream : std::vector(context->streams.begin(), context->streams.end()))
      stream->close(true);
    runUntil([&] { return context->streams.empty(); }, 20000);
    for (int fd : fds) ::close(fd);
  }
  MeshRig(const MeshRig&) = delete;
  MeshRig& operator=(const MeshRig&) = delete;

  int keep(int fd) {
    fds.push_back(fd);
    return fd;
  }
  bool runUntil(const std::function<bool()>& done, int rounds = 200000) {
    for (int i = 0; i < rounds && !done(); ++i) {
      uv_run(&loop, UV_RUN_NOWAIT);
      if (i > 1000) ::usleep(50);
    }
    return done();
  }
  void advance(int64_t ms) {
    clock->advance(ms);
    context->wheel.advance(context->nowMs());
  }
  double counter(const std::string& name, const std::string& label, const std::string& value) {
    return registry.counter(name, "", {{label, value}}).Value();
  }
  // Everything `fd` has to read now (appended); false once it saw EOF or a reset.
  static bool readInto(int fd, std::string& into) {
    char buffer[65536];
    for (;;) {
      const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n > 0) {
        into.append(buffer, static_cast<size_t>(n));
        continue;
      }
      return !(n == 0 || (n < 0 && errno != EAGAIN));
    }
  }
  static void sendAll(int fd, std::string_view bytes) {
    REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(bytes.size()));
  }
};

// ---------------------------------------------------------------------------------------------
// The sender

struct SenderRig : MeshRig {
  MeshRouteTable table;
  std::optional<MeshForwarder> forwarder;
  uint16_t portB = 0;
  uint16_t portC = 0;
  int listenB = -1;
  int listenC = -1;
  int visitorPeer = -1;
  TcpStream* visitor = nullptr;
  std::vector<VisitorOutcome> givenUp;
  const Bytes hello = helloWithSni("web.t1." + std::string(kDomain));

  SenderRig() {
    listenB = keep(listenOn("127.0.0.12", portB));
    listenC = keep(listenOn("127.0.0.13", portC));
    table.replace(1,
                  {{"B", "127.0.0.12:" + std::to_string(portB), true},
                   {"C", "127.0.0.13:" + std::to_string(portC), true}},
                  {{"t1", "web", "B", 2000, ""}, {"t1", "web", "C", 1000, ""}});
    forwarder.emplace(*context, table, MeshForwarderOptions{"A", kSecret, "127.0.0.11:9000", 3'000},
                      [this](TcpStream* stream, VisitorOutcome outcome, const std::string&) {
                        givenUp.push_back(outcome);
                        stream->close(false);
                      });
    const auto [local, peer] = ot::test::loopbackPair();
    visitorPeer = keep(peer);
    visitor = TcpStream::adopt(*context, local, nullptr);
    REQUIRE(visitor != nullptr);
    visitor->setPeer(ot::PeerEndpoint{"198.51.100.7", 40123});
  }
  ~SenderRig() { forwarder.reset(); }

  bool forward() {
    Bytes copy = hello;
    ot::relayd::SourceSlot slot;
    return forwarder->forward(visitor, "t1", "web", std::move(copy), std::move(slot),
                              VisitorOutcome::kRejectedNoBridge);
  }
  // Accepts the forward on `listener`; checks the header and the hello that follow.
  int acceptForward(int listener, const std::string& receiver) {
    int fd = -1;
    REQUIRE(runUntil([&] {
      if (fd < 0) fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      return fd >= 0;
    }));
    keep(fd);
    CHECK(peerIpOf(fd) == "127.0.0.11");  // from this machine's internal IP
    std::string got;
    const size_t want = hello.size();
    REQUIRE(runUntil([&] {
      readInto(fd, got);
      const size_t newline = got.find('\n');
      return newline != std::string::npos && got.size() >= newline + 1 + want;
    }));
    const size_t newline = got.find('\n');
    mesh::NonceWindow window;
    auto header = mesh::verifyForwardHeader(
        std::string_view(got).substr(0, newline), kSecret, receiver, ot::unixNowMs(),
        [](std::string_view sender) { return sender == "A"; }, window);
    REQUIRE(header.ok());
    CHECK(header->tunnelId == "t1");
    CHECK(header->route == "web");
    CHECK(header->visitorAddress == "198.51.100.7:40123");
    CHECK(got.substr(newline + 1) == std::string(hello.begin(), hello.end()));
    return fd;
  }
  double failures(const char* reason) {
    return counter("opentunnel_cluster_forward_failures_total", "reason", reason);
  }
};

}  // namespace

TEST_CASE_FIXTURE(SenderRig, "mesh forward sender: 1 -> the visitor and the holder are spliced") {
  REQUIRE(forward());
  CHECK(counter("opentunnel_mesh_lookups_total", "result", "hit") == 1);
  const int holder = acceptForward(listenB, "B");
  sendAll(holder, "1\nfrom the holder");
  std::string atVisitor;
  REQUIRE(runUntil([&] {
    readInto(visitorPeer, atVisitor);
    return atVisitor.size() >= 15;
  }));
  CHECK(atVisitor == "from the holder");
  sendAll(visitorPeer, "from the visitor");
  std::string atHolder;
  REQUIRE(runUntil([&] {
    readInto(holder, atHolder);
    return atHolder.size() >= 16;
  }));
  CHECK(atHolder == "from the visitor");
  CHECK(counter("opentunnel_visitor_connections_total", "outcome", "forwarded_out") == 1);
  CHECK(givenUp.empty());
}

TEST_CASE_FIXTURE(SenderRig, "mesh forward sender: 0 -> the next holder once, then rejected") {
  REQUIRE(forward());
  const int first = acceptForward(listenB, "B");  // the newest attach first
  sendAll(first, "0\n");
  const int second = acceptForward(listenC, "C");
  sendAll(second, "0\n");
  REQUIRE(runUntil([&] { return !givenUp.empty(); }));
  CHECK(givenUp == std::vector{VisitorOutcome::kRejectedNoBridge});
  CHECK(failures("refused") == 2);
  CHECK(counter("opentunnel_visitor_connections_total", "outcome", "forwarded_out") == 0);
  REQUIRE(runUntil([&] { return forwarder->triesInFlight() == 0; }));
}

TEST_CASE_FIXTURE(SenderRig, "mesh forward sender: a silent holder times out, the next serves") {
  REQUIRE(forward());
  (void)acceptForward(listenB, "B");
  advance(2'500);
  CHECK(failures("timeout") == 0);
  advance(1'000);
  CHECK(failures("timeout") == 1);
  const int next = acceptForward(listenC, "C");
  sendAll(next, "1\n");
  REQUIRE(runUntil([&] {
    return counter("opentunnel_visitor_connections_total", "outcome", "forwarded_out") == 1;
  }));
  CHECK(givenUp.empty());
}

TEST_CASE_FIXTURE(SenderRig, "mesh forward sender: a closed or unreachable holder -> the next") {
  // B's listener goes away: connect fails; C closes without answering: io; then rejected.
  ::close(listenB);
  fds.erase(std::find(fds.begin(), fds.end(), listenB));
  REQUIRE(forward());
  const int next = acceptForward(listenC, "C");
  ::shutdown(next, SHUT_WR);
  REQUIRE(runUntil([&] { return !givenUp.empty(); }));
  CHECK(failures("connect") == 1);
  CHECK(failures("io") == 1);
}

TEST_CASE_FIXTURE(SenderRig,
                  "mesh forward sender: no linked peer and no holder -> a miss, not taken") {
  std::vector<MeshPeer> unlinked = table.peers();
  for (MeshPeer& peer : unlinked) peer.linked = false;
  table.replace(2, unlinked, {});
  CHECK_FALSE(forward());
  CHECK(counter("opentunnel_mesh_lookups_total", "result", "miss") == 1);
  CHECK(counter("opentunnel_mesh_lookups_total", "result", "hit") == 0);
  CHECK(forwarder->waiting() == 0);
  visitor->close(false);
}

TEST_CASE_FIXTURE(SenderRig,
                  "mesh forward sender: no holder yet -> the visitor waits, then is rejected") {
  table.replace(2, table.peers(), {});
  REQUIRE(forward());  // taken: waiting for the table
  CHECK(forwarder->waiting() == 1);
  CHECK(counter("opentunnel_mesh_lookups_total", "result", "miss") == 0);
  advance(kMissWaitMs - 50);
  forwarder->tableChanged();  // a change that names no holder of the route
  CHECK(givenUp.empty());
  advance(300);  // past the wait, rounded up to the relay's timer tick (250 ms)
  REQUIRE(runUntil([&] { return !givenUp.empty(); }));
  CHECK(givenUp == std::vector{VisitorOutcome::kRejectedNoBridge});
  CHECK(counter("opentunnel_mesh_lookups_total", "result", "miss") == 1);
  CHECK(counter("opentunnel_mesh_lookups_total", "result", "hit") == 0);
  CHECK(forwarder->waiting() == 0);
  CHECK(failures("timeout") == 0);  // no try was made
  REQUIRE(runUntil([&] { return forwarder->triesInFlight() == 0; }));
}

TEST_CASE_FIXTURE(SenderRig,
                  "mesh forward sender: a holder named during the wait takes the visitor") {
  const std::vector<MeshPeer> peers = table.peers();
  table.replace(2, peers, {});
  REQUIRE(forward());
  advance(100);
  // The attach elsewhere reaches this machine's copy: the waiting visitor goes to B.
  table.replace(3, peers, {{"t1", "web", "B", 2000, ""}});
  forwarder->tableChanged();
  CHECK(forwarder->waiting() == 0);
  CHECK(counter("opentunnel_mesh_lookups_total", "result", "hit") == 1);
  const int holder = acceptForward(listenB, "B");
  sendAll(holder, "1\n");
  REQUIRE(runUntil([&] {
    return counter("opentunnel_visitor_connections_total", "outcome", "forwarded_out") == 1;
  }));
  advance(2 * kMissWaitMs);  // the wait's timer is gone with the wait
  CHECK(givenUp.empty());
  CHECK(counter("opentunnel_mesh_lookups_total", "result", "miss") == 0);
}

TEST_CASE_FIXTURE(SenderRig,
                  "mesh forward sender: a visitor that leaves while it waits is let go") {
  table.replace(2, table.peers(), {});
  REQUIRE(forward());
  CHECK(forwarder->waiting() == 1);
  ::close(visitorPeer);
  fds.erase(std::find(fds.begin(), fds.end(), visitorPeer));
  visitor->close(true);  // as the relay's shutdown or a reset would
  REQUIRE(runUntil([&] { return forwarder->waiting() == 0; }));
  REQUIRE(runUntil([&] { return forwarder->triesInFlight() == 0; }));
  advance(2 * kMissWaitMs);
  CHECK(givenUp.empty());
}

// ---------------------------------------------------------------------------------------------
// The receiver

namespace {

// Records what it was asked to route and takes the visitor as a bridge would (answers 1).
struct RecordingRouter final : ForwardedVisitorRouter {
  std::optional<SniTarget> target;
  std::string peer;
  std::string origin;  // the origin the header named
  ForwardedRoute answer = ForwardedRoute::kServed;
  TcpStream* taken = nullptr;

  ForwardedRoute routeForwarded(TcpStream* stream, const SniTarget& routed, Bytes,
                                const std::function<bool()>& accept,
                                std::string_view named) override {
    target = routed;
    origin = std::string(named);
    peer = stream->peer().toString();
    if (answer != ForwardedRoute::kServed) return answer;
    REQUIRE(accept());
    taken = stream;
    stream->write(Bytes{'o', 'k'});  // the first byte of the stream, after the answer
    return answer;
  }
};

struct ReceiverRig : MeshRig {
  MeshRouteTable table;  // the receiver's: A linked at 127.0.0.11
  RecordingRouter recorder;
  ForwardedVisitorRouter* router = &recorder;
  std::unique_ptr<InternalListener> listener;
  uint16_t port = 0;

  ReceiverRig() {
    table.replace(1, {{"A", "127.0.0.11:9000", true}, {"C", "127.0.0.13:9000", true}}, {});
  }
  ~ReceiverRig() {
    if (recorder.taken != nullptr) recorder.taken->close(true);
    listener.reset();
  }
  void open() {
    InternalListenerOptions options;
    options.address =
        ot::config::ListenAddress{ot::config::ListenAddress::Kind::kTcp, "127.0.0.12", 0, {}};
    options.secret = kSecret;
    options.machineId = "B";
    options.handoffSocketPath = "/nonexistent/mesh-handoff.sock";
    options.linkedSender = [this](std::string_view machine, std::string_view host) {
      return table.linkedFrom(machine, host);
    };
    options.acceptForward = [this](int fd, const mesh::ForwardHeader& header,
                                   std::span<const uint8_t> rest) {
      ForwardedVisitor::start(*context, *router, fd, header, rest);
    };
    auto opened = InternalListener::open(*context, std::move(options));
    REQUIRE(opened.ok());
    listener = std::move(opened).value();
    port = listener->port();
  }
  static std::string header(const std::string& receiver = "B", int64_t ageMs = 0,
                            const std::string& secret = kSecret, const std::string& sender = "A") {
    mesh::ForwardHeader h;
    h.envelope.sender = sender;
    h.envelope.receiver = receiver;
    h.envelope.timeMs = ot::unixNowMs() - ageMs;
    h.envelope.nonce = *mesh::randomNonce();
    h.tunnelId = "t1";
    h.route = "web";
    h.visitorAddress = "203.0.113.9:51000";
    return *mesh::buildForwardHeader(secret, h);
  }
  // Sends `line` and a ClientHello for `host` from `sourceIp`; returns what came back until the
  // connection closed or `want` bytes arrived.
  std::string exchange(const std::string& line, const std::string& host = "web.t1.tunnels.test",
                       const char* sourceIp = "127.0.0.11", size_t want = SIZE_MAX) {
    const int fd = keep(connectFrom(sourceIp, "127.0.0.12", port));
    const Bytes hello = helloWithSni(host);
    std::string bytes = line;
    bytes.append(hello.begin(), hello.end());
    sendAll(fd, bytes);
    std::string got;
    REQUIRE(runUntil([&] { return !readInto(fd, got) || got.size() >= want; }));
    return got;
  }
  double refused(const std::string& reason) {
    return counter("opentunnel_mesh_internal_refused_total", "reason", reason);
  }
};

}  // namespace

TEST_CASE_FIXTURE(ReceiverRig, "mesh forward receiver: an accepted forward answers 1, then flows") {
  open();
  const std::string got = exchange(header(), "web.t1.tunnels.test", "127.0.0.11", 4);
  CHECK(got == "1\nok");
  REQUIRE(recorder.target.has_value());
  CHECK(recorder.target->tunnelId == "t1");
  CHECK(recorder.target->route == "web");
  // The real visitor's address from the header: per-source limits and the bridge's open message.
  CHECK(recorder.peer == "203.0.113.9:51000");
  CHECK(counter("opentunnel_mesh_internal_connections_total", "kind", "forward") == 1);
}

TEST_CASE_FIXTURE(ReceiverRig, "mesh forward receiver: refused headers are counted and closed") {
  open();
  const std::string line = header();
  CHECK(exchange(line, "web.t1.tunnels.test", "127.0.0.11", 4) == "1\nok");
  recorder.taken->close(true);
  recorder.taken = nullptr;
  CHECK(exchange(line).empty());  // the same header again
  CHECK(refused("replayed") == 1);
  CHECK(exchange(header("B", 60'000)).empty());
  CHECK(refused("stale") == 1);
  CHECK(exchange(header("Z")).empty());
  CHECK(refused("not_for_us") == 1);
  CHECK(exchange(header("B", 0, std::string(40, 'x'))).empty());
  CHECK(refused("bad_proof") == 1);
  CHECK(exchange(header("B", 0, kSecret, "D")).empty());  // not a linked machine
  CHECK(refused("not_linked") == 1);
  // A linked machine's header from another address than its linked one.
  CHECK(exchange(header(), "web.t1.tunnels.test", "127.0.0.14").empty());
  CHECK(refused("not_linked") == 2);
  // A machine known but not linked now (its link ended; its relayd still answers).
  table.replace(2, {{"A", "127.0.0.11:9000", false}}, {});
  CHECK(exchange(header()).empty());
  CHECK(refused("not_linked") == 3);
  CHECK(counter("opentunnel_mesh_internal_connections_total", "kind", "forward") == 1);
}

TEST_CASE_FIXTURE(ReceiverRig, "mesh forward receiver: a ClientHello for another tunnel refused") {
  open();
  CHECK(exchange(header(), "web.t2.tunnels.test").empty());
  CHECK(exchange(header(), "t1.tunnels.test").empty());  // another route of the same tunnel
  CHECK(refused(std::string(kForwardHelloMismatch)) == 2);
  CHECK_FALSE(recorder.target.has_value());
}

TEST_CASE_FIXTURE(ReceiverRig,
                  "mesh forward receiver: no bridge here -> 0, never forwarded again") {
  // A real Relay with forwarding on and a table naming another holder (C) of the route: a
  // forwarded visitor still gets 0 and no connection to C is tried.
  config.internalAddress = "127.0.0.12:0";
  config.identity.machineId = "B";
  config.internalToken = kSecret;
  uint16_t portC = 0;
  const int listenC = keep(listenOn("127.0.0.13", portC));
  ControlClientOptions control;
  control.socketPath = "/nonexistent/control.sock";
  control.machineId = "B";
  Relay relay(*context, control);
  relay.meshRoutes().replace(1, {{"C", "127.0.0.13:" + std::to_string(portC), true}},
                             {{"t1", "web", "C", 1000, ""}});
  REQUIRE(relay.meshForwarder() != nullptr);
  router = &relay;
  open();
  CHECK(exchange(header()) == "0\n");
  CHECK(counter("opentunnel_visitor_connections_total", "outcome", "rejected_unknown_tunnel") == 1);
  CHECK(counter("opentunnel_mesh_lookups_total", "result", "hit") == 0);
  CHECK(::accept4(listenC, nullptr, nullptr, SOCK_NONBLOCK) < 0);
  CHECK(relay.meshForwarder()->triesInFlight() == 0);
  listener.reset();
  relay.stop();
  // The relay's handles close on the loop before the relay goes away.
  for (int i = 0; i < 100; ++i) uv_run(&loop, UV_RUN_NOWAIT);
}

TEST_CASE_FIXTURE(MeshRig,
                  "mesh forward sender: the relay forwards a visitor with no bridge here") {
  // Relay::routeVisitor itself: no local bridge, the table names B; B answers 0 and nobody else
  // holds the route, so the visitor is rejected as it was before the mesh.
  config.internalAddress = "127.0.0.11:0";
  config.identity.machineId = "A";
  config.internalToken = kSecret;
  uint16_t portB = 0;
  const int listenB = keep(listenOn("127.0.0.12", portB));
  ControlClientOptions control;
  control.socketPath = "/nonexistent/control.sock";
  control.machineId = "A";
  Relay relay(*context, control);
  relay.meshRoutes().replace(1, {{"B", "127.0.0.12:" + std::to_string(portB), true}},
                             {{"t1", "web", "B", 1000, ""}});
  const auto [local, peer] = ot::test::loopbackPair();
  keep(peer);
  TcpStream* visitor = TcpStream::adopt(*context, local, nullptr);
  REQUIRE(visitor != nullptr);
  ++context->openConnections;
  SniTarget target;
  target.kind = SniTarget::Kind::kTunnel;
  target.tunnelId = "t1";
  target.route = "web";
  relay.routeVisitor(visitor, target, helloWithSni("web.t1.tunnels.test"));
  CHECK(counter("opentunnel_mesh_lookups_total", "result", "hit") == 1);
  int holder = -1;
  REQUIRE(runUntil([&] {
    if (holder < 0) holder = ::accept4(listenB, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    return holder >= 0;
  }));
  keep(holder);
  std::string got;
  REQUIRE(runUntil([&] {
    readInto(holder, got);
    return got.find('\n') != std::string::npos;
  }));
  CHECK(got.starts_with("OPENTUNNEL-FORWARD/2 A B "));
  sendAll(holder, "0\n");
  REQUIRE(runUntil([&] {
    return counter("opentunnel_visitor_connections_total", "outcome", "rejected_unknown_tunnel") ==
           1;
  }));
  CHECK(counter("opentunnel_cluster_forward_failures_total", "reason", "refused") == 1);
  CHECK(context->openConnections == 0);
  relay.stop();
  for (int i = 0; i < 100; ++i) uv_run(&loop, UV_RUN_NOWAIT);
}

TEST_CASE_FIXTURE(SenderRig,
                  "mesh forward sender: a holder socket closed under it is a failed try") {
  REQUIRE(forward());
  (void)acceptForward(listenB, "B");
  // Shutdown resets every stream: the holder's socket goes first here.
  for (TcpStream* stream : std::vector(context->streams.begin(), context->streams.end())) {
    if (stream != visitor) stream->close(true);
  }
  REQUIRE(runUntil([&] { return failures("io") == 1; }));
  const int next = acceptForward(listenC, "C");
  sendAll(next, "1\n");
  REQUIRE(runUntil([&] {
    return counter("opentunnel_visitor_connections_total", "outcome", "forwarded_out") == 1;
  }));
}

TEST_CASE_FIXTURE(SenderRig,
                  "mesh forward sender: the header names the origin chosen for the "
                  "visitor, sent to a machine holding it") {
  // B holds origin a, C origin b: the visitor's key picks one, and the forward goes there.
  table.replace(2,
                {{"B", "127.0.0.12:" + std::to_string(portB), true},
                 {"C", "127.0.0.13:" + std::to_string(portC), true}},
                {{"t1", "web", "B", 2000, "a"}, {"t1", "web", "C", 1000, "b"}});
  const std::string key = "198.51.100.7";
  const std::vector<OriginCandidate> candidates = {{"a", 1.0, false}, {"b", 1.0, false}};
  const bool wantB = chooseOrigin(key, candidates) == 0;
  Bytes copy = hello;
  SourceSlot slot;
  REQUIRE(forwarder->forward(visitor, "t1", "web", std::move(copy), std::move(slot),
                             VisitorOutcome::kRejectedNoBridge, key));
  const int listener = wantB ? listenB : listenC;
  int fd = -1;
  REQUIRE(runUntil([&] {
    if (fd < 0) fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    return fd >= 0;
  }));
  keep(fd);
  std::string got;
  REQUIRE(runUntil([&] {
    readInto(fd, got);
    return got.find('\n') != std::string::npos;
  }));
  mesh::NonceWindow window;
  auto header = mesh::verifyForwardHeader(
      std::string_view(got).substr(0, got.find('\n')), kSecret, wantB ? "B" : "C", ot::unixNowMs(),
      [](std::string_view sender) { return sender == "A"; }, window);
  REQUIRE(header.ok());
  CHECK(header->origin == (wantB ? "a" : "b"));
  sendAll(fd, "1\n");
  REQUIRE(runUntil([&] {
    return counter("opentunnel_visitor_connections_total", "outcome", "forwarded_out") == 1;
  }));
}

TEST_CASE_FIXTURE(ReceiverRig, "mesh forward receiver: the header's origin reaches the router") {
  open();
  mesh::ForwardHeader h;
  h.envelope.sender = "A";
  h.envelope.receiver = "B";
  h.envelope.timeMs = ot::unixNowMs();
  h.envelope.nonce = *mesh::randomNonce();
  h.tunnelId = "t1";
  h.route = "web";
  h.visitorAddress = "203.0.113.9:51000";
  h.origin = "alpha";
  const std::string got =
      exchange(*mesh::buildForwardHeader(kSecret, h), "web.t1.tunnels.test", "127.0.0.11", 4);
  CHECK(got == "1\nok");
  CHECK(recorder.origin == "alpha");
  // Without one: "".
  recorder.origin = "x";
  CHECK(exchange(header(), "web.t1.tunnels.test", "127.0.0.11", 4) == "1\nok");
  CHECK(recorder.origin.empty());
}
