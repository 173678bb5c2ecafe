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

// A bridge with no room: the stream must ask for turns and send at most a quantum per turn.
class TurnHost final : public ot::client::StreamHost {
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
  [[nodiscard]] bool bridgeHasRoom() const override { return room; }
  void onStreamReady(uint32_t connId) override {
    CHECK(connId == 5);
    ++readyCalls;
  }

  bool room = false;
  int readyCalls = 0;
  std::vector<size_t> dataFrames;
  std::string data;
  bool ended = false;
  bool freed = false;
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
