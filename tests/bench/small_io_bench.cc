// ot_small_io_bench: the kernel's price for one small message on an idle loopback TCP connection,
// as relayd pays it for a heartbeat (a ping written, a pong read), with one syscall per message
// against one io_uring submission for a batch of them (docs/capacity.md, "io_uring for the
// heartbeat"). Built with everything else, never run by CI: it prints numbers and checks
// nothing beyond each call moving its whole message.
//
// N connections are opened to a listener of its own on 127.0.0.1 (both ends in this process).
// Each round sends one 31-byte message on every accepted end, then reads it on every connecting
// end: first with write(2) and read(2) one connection after another, then with io_uring
// submissions of `--batch` sends and then `--batch` receives. The CPU is this process's
// (CLOCK_PROCESS_CPUTIME_ID, io_uring's worker threads included). On loopback a send also runs
// the receiver's TCP processing, as relayd's `write` does for the load tool's socket.
//
//   ot_small_io_bench [--connections 3000] [--rounds 20] [--batch 56]
//
// The batch sizes that matter for relayd: ~320 pings leave in one timer-wheel slot at 19,000
// bridges, ~56 pongs are read per loop wakeup (docs/capacity.md, "Where the idle CPU goes").
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

namespace {

constexpr std::string_view kMessage = "a ping-sized record, 31 bytes.";

double processCpuUs() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e6 + static_cast<double>(now.tv_nsec) / 1e3;
}

[[noreturn]] void fail(const char* what) {
  std::perror(what);
  std::exit(1);
}

struct Pair {
  int accepted = -1;    // relayd's end
  int connecting = -1;  // the peer's
};

std::vector<Pair> openPairs(size_t count) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      listen(listener, 4096) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    fail("listener");
  std::vector<Pair> pairs(count);
  const int one = 1;
  for (auto& pair : pairs) {
    pair.connecting = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (pair.connecting < 0 ||
        connect(pair.connecting, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
      fail("connect");
    pair.accepted = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (pair.accepted < 0) fail("accept");
    // As relayd's sockets: small writes leave at once.
    setsockopt(pair.accepted, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(pair.connecting, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  close(listener);
  return pairs;
}

// One io_uring submission per `batch` sends (or receives), all waited for.
void ringRound(io_uring& ring, const std::vector<Pair>& pairs, size_t batch, bool send,
               char* buffer, size_t bufferSize) {
  for (size_t done = 0; done < pairs.size();) {
    const size_t count = std::min(batch, pairs.size() - done);
    for (size_t i = 0; i < count; ++i) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (send)
        io_uring_prep_send(sqe, pairs[done + i].accepted, kMessage.data(), kMessage.size(), 0);
      else
        io_uring_prep_recv(sqe, pairs[done + i].connecting, buffer, bufferSize, 0);
    }
    if (io_uring_submit_and_wait(&ring, static_cast<unsigned>(count)) < 0) fail("io_uring submit");
    io_uring_cqe* cqe = nullptr;
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      if (cqe->res != static_cast<int>(kMessage.size())) {
        std::fprintf(stderr, "io_uring %s: %d\n", send ? "send" : "recv", cqe->res);
        std::exit(1);
      }
      ++seen;
    }
    io_uring_cq_advance(&ring, seen);
    done += count;
  }
}

}  // namespace

int main(int argc, char** argv) {
  size_t connections = 3000;
  size_t rounds = 20;
  size_t batch = 56;
  bool usable = argc % 2 == 1;  // flags come in pairs
  for (int i = 1; usable && i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    const size_t value = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--connections")
      connections = value;
    else if (flag == "--rounds")
      rounds = value;
    else if (flag == "--batch")
      batch = value;
    else
      usable = false;
  }
  if (!usable || connections == 0 || rounds == 0 || batch == 0 || batch > 4096) {
    std::fprintf(stderr,
                 "usage: ot_small_io_bench [--connections N] [--rounds N] [--batch 1-4096]\n");
    return 2;
  }
  const auto pairs = openPairs(connections);
  io_uring ring{};
  if (io_uring_queue_init(4096, &ring, 0) != 0) fail("io_uring_queue_init");
  char buffer[256];
  double syscallSend = 0, syscallRecv = 0, ringSend = 0, ringRecv = 0;
  for (size_t round = 0; round < rounds; ++round) {
    double start = processCpuUs();
    for (const auto& pair : pairs) {
      if (write(pair.accepted, kMessage.data(), kMessage.size()) !=
          static_cast<ssize_t>(kMessage.size()))
        fail("write");
    }
    double sent = processCpuUs();
    for (const auto& pair : pairs) {
      if (read(pair.connecting, buffer, sizeof buffer) != static_cast<ssize_t>(kMessage.size()))
        fail("read");
    }
    double received = processCpuUs();
    syscallSend += sent - start;
    syscallRecv += received - sent;

    start = processCpuUs();
    ringRound(ring, pairs, batch, true, buffer, sizeof buffer);
    sent = processCpuUs();
    ringRound(ring, pairs, batch, false, buffer, sizeof buffer);
    received = processCpuUs();
    ringSend += sent - start;
    ringRecv += received - sent;
  }
  io_uring_queue_exit(&ring);
  const double messages = static_cast<double>(connections * rounds);
  std::printf("%zu connections x %zu rounds, io_uring batches of %zu; CPU per message:\n",
              connections, rounds, batch);
  std::printf("  send     write(2) %6.2f us   io_uring %6.2f us\n", syscallSend / messages,
              ringSend / messages);
  std::printf("  receive  read(2)  %6.2f us   io_uring %6.2f us\n", syscallRecv / messages,
              ringRecv / messages);
  return 0;
}
