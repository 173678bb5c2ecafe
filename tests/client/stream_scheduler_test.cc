// The bridge's turns between streams (issue 12 item 5): StreamScheduler's round-robin and low
// mark as pure logic, then a LocalStream that waits for its turns, one frame of at most the
// quantum each, while the bridge has no room.
#include "client/stream_scheduler.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "client/local_stream.h"
#include "common/bridge_frame.h"
#include "tests/client/test_support.h"

using namespace ot::client_test;
using ot::client::StreamScheduler;

TEST_CASE("client stream scheduler: streams take turns round-robin, one place each") {
  StreamScheduler scheduler(1000);
  scheduler.markReady(1);
  scheduler.markReady(2);
  scheduler.markReady(1);  // already waiting: keeps its place
  scheduler.markReady(3);
  CHECK(scheduler.waiting() == 3);
  CHECK(scheduler.next(0) == std::optional<uint32_t>(1));
  scheduler.markReady(1);  // more to send: behind the others
  CHECK(scheduler.next(0) == std::optional<uint32_t>(2));
  CHECK(scheduler.next(0) == std::optional<uint32_t>(3));
  CHECK(scheduler.next(0) == std::optional<uint32_t>(1));
  CHECK(scheduler.next(0) == std::nullopt);
  scheduler.markReady(4);
  scheduler.markReady(5);
  scheduler.remove(4);  // gone
  scheduler.remove(9);  // never waited: nothing happens
  CHECK(scheduler.next(0) == std::optional<uint32_t>(5));
  CHECK(scheduler.waiting() == 0);
}

TEST_CASE("client stream scheduler: turns only below the low mark; room only with nobody waiting") {
  StreamScheduler scheduler(1000);
  CHECK(scheduler.idleWithRoom(999));
  CHECK_FALSE(scheduler.idleWithRoom(1000));
  scheduler.markReady(7);
  CHECK_FALSE(scheduler.idleWithRoom(0));       // a waiting stream goes first
  CHECK(scheduler.next(1000) == std::nullopt);  // the socket still holds enough
  CHECK(scheduler.next(5000) == std::nullopt);
  CHECK(scheduler.waiting() == 1);  // and keeps its turn for the top-up
  CHECK(scheduler.next(999) == std::optional<uint32_t>(7));
  CHECK(scheduler.idleWithRoom(999));
}

namespace {

std::string sourceBytes(size_t size) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>('a' + i % 26);
  return bytes;
}

// A bridge that records what a stream sends it: data frames (their sizes and bytes), its end,
// its freeing and its requests for a turn. Subclasses say whether it has room.
class RecordingHost : public ot::client::StreamHost {
 public:
  void sendStreamFrame(std::span<const uint8_t> head, std::span<const uint8_t> payload) override {
    if (head.empty()) return;
    if (head[0] == static_cast<uint8_t>(ot::bridge::FrameKind::kData)) {
      dataFrames.push_back(payload.size());
      data.append(payload.begin(), payload.end());
    } else if (head[0] == static_cast<uint8_t>(ot::bridge::FrameKind::kEnd)) {
      ended = true;
    }
  }
  void onStreamDeadlineChanged() override {}
  void onStreamFreed(uint32_t) override { freed = true; }
  [[nodiscard]] bool bridgeCongested() const override { return false; }
  void onStreamReady(uint32_t) override { ++readyCalls; }

  int readyCalls = 0;
  std::vector<size_t> dataFrames;
  std::string data;
  bool ended = false;
  bool freed = false;
};

// A bridge with no room: the stream must ask for turns and send at most a quantum per turn.
class TurnHost final : public RecordingHost {
 public:
  [[nodiscard]] bool bridgeHasRoom() const override { return room; }
  void onStreamReady(uint32_t connId) override {
    CHECK(connId == 5);
    RecordingHost::onStreamReady(connId);
  }

  bool room = false;
};

}  // namespace

TEST_CASE("client stream: without room on the bridge, data waits for turns of one quantum") {
  TestLoop loop;
  const std::string payload = sourceBytes(100'000);
  LocalServer source(loop.get(), LocalServer::Mode::kSource, payload);
  TurnHost host;
  ot::client::StreamOptions options;
  options.connId = 5;
  options.target = ot::client::LocalTarget{"127.0.0.1", source.port()};
  options.sendWindow = 1 << 20;
  ot::client::LocalStream* stream = ot::client::LocalStream::create(loop.get(), host, options);
  REQUIRE(stream != nullptr);
  stream->start();
  // Connected, it wants to read but the bridge has no room: it asks for a turn, reads nothing.
  (void)loop.runUntil([&] { return host.readyCalls > 0 || !host.dataFrames.empty(); });
  loop.runFor(50);
  CHECK(host.dataFrames.empty());
  REQUIRE(host.readyCalls > 0);

  // Each turn: the first starts reading; the others send one frame of at most 4096 bytes.
  int turns = 0;
  while (!host.ended && turns < 1000) {
    const int asked = host.readyCalls;
    const size_t before = host.data.size();
    const size_t sent = stream->onTurn(4096);
    ++turns;
    CHECK(sent <= 4096);
    CHECK(host.data.size() - before == sent);
    // Reading (or the end of file) goes on through the loop until the stream asks again.
    REQUIRE(loop.runUntil([&] { return host.readyCalls > asked || host.ended; }));
  }
  CHECK(host.ended);
  CHECK(host.data == payload);
  CHECK(host.dataFrames.size() >= payload.size() / 4096);
  for (const size_t frame : host.dataFrames) CHECK(frame <= 4096);

  stream->abort();
  REQUIRE(loop.runUntil([&] { return host.freed; }));
}

TEST_CASE("client stream scheduler: another active stream bounds what a stream has in flight") {
  StreamScheduler scheduler;
  constexpr size_t kWindow = 512 * 1024;
  constexpr size_t kSendBound = kWindow / 4 + StreamScheduler::kFairInFlight;  // 192 KiB
  constexpr size_t kReceiveBound = StreamScheduler::kFairInFlight;             // 64 KiB
  // Alone (its own activity does not count): the whole window both ways.
  scheduler.noteActive(1, 1000);
  CHECK_FALSE(scheduler.othersActive(1, 1000));
  CHECK(scheduler.sendAllowance(1, kWindow, 1000, 0) == kWindow);
  CHECK(scheduler.receiveAllowance(1, kWindow, 1000, 0) == kWindow);
  // Stream 2 had data at 1010: stream 1 is bounded until 100 ms after, stream 2 is not.
  scheduler.noteActive(2, 1010);
  scheduler.noteActive(1, 1020);  // the bulk stream goes on; 2 is still the other one
  CHECK(scheduler.othersActive(1, 1020));
  CHECK(scheduler.sendAllowance(1, kWindow, 1020, 0) == kSendBound);
  CHECK(scheduler.receiveAllowance(1, kWindow, 1020, 0) == kReceiveBound);
  CHECK(scheduler.othersActive(2, 1020));  // 1 is active for 2 as well
  CHECK(scheduler.sendAllowance(1, kWindow, 1010 + StreamScheduler::kActiveForMs - 1, 0) ==
        kSendBound);
  CHECK(scheduler.sendAllowance(1, kWindow, 1010 + StreamScheduler::kActiveForMs, 0) == kWindow);
  // The bound grows by one round trip at 1 Gbit/s: at 50 ms it is the whole window again.
  CHECK(scheduler.sendAllowance(1, kWindow, 1050, 100) == kSendBound + 100 * 125);
  CHECK(scheduler.receiveAllowance(1, kWindow, 1050, 100) == kReceiveBound + 100 * 125);
  CHECK(scheduler.sendAllowance(1, kWindow, 1050, 50'000) == kWindow);
  CHECK(scheduler.receiveAllowance(1, kWindow, 1050, 50'000) == kWindow);
  // A stream waiting for a turn is active however long ago it had data.
  scheduler.markReady(3);
  CHECK(scheduler.othersActive(1, 100'000));
  CHECK_FALSE(scheduler.othersActive(3, 100'000));
  CHECK(scheduler.next(0) == std::optional<uint32_t>(3));
  CHECK_FALSE(scheduler.othersActive(1, 100'000));
  // A stream that is gone is not active.
  scheduler.noteActive(4, 200'000);
  scheduler.remove(4);
  CHECK_FALSE(scheduler.othersActive(1, 200'000));
}

namespace {

// A bridge with room, where the test sets the stream's send allowance (StreamScheduler's
// answer while another stream is active).
class AllowanceHost final : public RecordingHost {
 public:
  [[nodiscard]] bool bridgeHasRoom() const override { return true; }
  void onStreamActive(uint32_t connId) override { active.push_back(connId); }
  [[nodiscard]] size_t sendAllowance(uint32_t, size_t window) const override {
    return std::min(window, allowance);
  }

  size_t allowance = SIZE_MAX;
  std::vector<uint32_t> active;
};

// A stream reading 1 MB from a local source through an AllowanceHost held to 192 KiB, sent
// up to that allowance (the relay's credit would allow its 512 KiB window).
struct AllowanceRig {
  explicit AllowanceRig(uint32_t connId)
      : payload(sourceBytes(1'000'000)), source(loop.get(), LocalServer::Mode::kSource, payload) {
    host.allowance = 192 * 1024;
    ot::client::StreamOptions options;
    options.connId = connId;
    options.target = ot::client::LocalTarget{"127.0.0.1", source.port()};
    options.sendWindow = 512 * 1024;
    stream = ot::client::LocalStream::create(loop.get(), host, options);
    REQUIRE(stream != nullptr);
    stream->start();
    REQUIRE(loop.runUntil([&] { return host.data.size() >= 192 * 1024; }));
    loop.runFor(50);
    CHECK(host.data.size() == 192 * 1024);
  }
  // The bytes sent are the source's, in order; then the stream is aborted and freed.
  void finish() {
    CHECK(host.data == payload.substr(0, host.data.size()));
    stream->abort();
    REQUIRE(loop.runUntil([&] { return host.freed; }));
  }

  TestLoop loop;
  std::string payload;
  LocalServer source;
  AllowanceHost host;
  ot::client::LocalStream* stream = nullptr;
};

}  // namespace

TEST_CASE(
    "client stream: with another stream active, a bulk stream keeps its allowance in "
    "flight, not its whole window") {
  // It sends up to the allowance and stops there, though the relay's credit allows 512 KiB.
  AllowanceRig rig(6);
  TestLoop& loop = rig.loop;
  AllowanceHost& host = rig.host;
  ot::client::LocalStream* stream = rig.stream;
  CHECK_FALSE(host.active.empty());
  CHECK(host.active.back() == 6);
  // The relay's grant of a quarter window frees that much of the allowance, no more.
  REQUIRE(stream->onCredit(128 * 1024) == ot::client::FrameVerdict::kOk);
  while (host.readyCalls > 0 && host.data.size() < 320 * 1024) {
    const int asked = host.readyCalls;
    (void)stream->onTurn(16 * 1024);
    (void)loop.runUntil([&] { return host.readyCalls > asked || host.data.size() >= 320 * 1024; },
                        200);
  }
  loop.runFor(50);
  CHECK(host.data.size() == 320 * 1024);
  // The other stream went quiet: the whole window (320 + 512 - 320 - 128 ... = the credit left).
  host.allowance = SIZE_MAX;
  REQUIRE(stream->onCredit(128 * 1024) == ot::client::FrameVerdict::kOk);
  for (int turns = 0; turns < 200 && host.data.size() < 768 * 1024; ++turns) {
    const int asked = host.readyCalls;
    (void)stream->onTurn(64 * 1024);
    (void)loop.runUntil([&] { return host.readyCalls > asked || host.data.size() >= 768 * 1024; },
                        200);
  }
  CHECK(host.data.size() == 768 * 1024);  // 512 KiB window + 256 KiB granted
  rig.finish();
}

TEST_CASE("client stream scheduler: when the other streams stop counting as active") {
  StreamScheduler scheduler;
  CHECK(scheduler.othersActiveUntil(1, 500) == 0);
  scheduler.noteActive(2, 1000);
  scheduler.noteActive(1, 1040);
  CHECK(scheduler.othersActiveUntil(1, 1050) == 1000 + StreamScheduler::kActiveForMs);
  CHECK(scheduler.othersActiveUntil(2, 1050) == 1040 + StreamScheduler::kActiveForMs);
  scheduler.markReady(3);  // waiting for a turn: active until it had it
  CHECK(scheduler.othersActiveUntil(1, 5000) == 5000 + StreamScheduler::kActiveForMs);
}

TEST_CASE(
    "client stream: held back by its allowance, a stream takes its whole window once the "
    "other streams went quiet, without waiting for credit") {
  AllowanceRig rig(8);
  TestLoop& loop = rig.loop;
  AllowanceHost& host = rig.host;
  ot::client::LocalStream* stream = rig.stream;
  // No credit comes (a visitor that does not read): the bridge's recheck alone frees it. Turns
  // are given only when asked for.
  int served = host.readyCalls;
  host.allowance = SIZE_MAX;
  stream->onAllowanceChanged();
  for (int rounds = 0; rounds < 200 && host.data.size() < 512 * 1024; ++rounds) {
    if (host.readyCalls > served) {
      served = host.readyCalls;
      (void)stream->onTurn(64 * 1024);
    }
    (void)loop.runUntil([&] { return host.readyCalls > served || host.data.size() >= 512 * 1024; },
                        50);
  }
  CHECK(host.data.size() == 512 * 1024);
  rig.finish();
}
