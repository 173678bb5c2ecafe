// BridgeSession alone: driven by the client's WebSocket frames (common/bridge_frame.h codec) on a
// fake transport, with a fake relay (RelayForBridge) and fake visitor streams (StreamForBridge),
// and time on a ManualClock that drives the relay's timer wheel. The relay's receive credit
// granted and spent, the bridge's visitor budget reached and released, stalled visitors reset
// within one wait, end and reset in each direction, drain with streams open.
#include "relayd/bridge_session.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <deque>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "common/bridge_control.h"
#include "common/bridge_frame.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "common/websocket_frame.h"
#include "common/websocket_message.h"
#include "relayd/relay_context.h"
#include "tests/relayd/manual_relay_loop.h"

using ot::relayd::BridgeForStream;
using ot::relayd::BridgeSession;
using ot::relayd::DetachOutcome;
using ot::relayd::RelayContext;
using ot::relayd::StreamForBridge;
namespace bridge = ot::bridge;
namespace ws = ot::ws;

namespace {

constexpr uint64_t kKey = 41;

struct FakeTransport final : ot::relayd::BridgeTransport {
  std::vector<uint8_t> out;  // everything the session sent, unencrypted
  size_t queued = 0;
  bool paused = false;
  bool closed = false;
  std::string peer = "192.0.2.9";

  size_t writes = 0;  // sendPlain calls: each is one TLS write and one socket write

  void sendPlain(std::span<const uint8_t> bytes) override {
    out.insert(out.end(), bytes.begin(), bytes.end());
    ++writes;
  }
  [[nodiscard]] size_t queuedBytes() const override { return queued; }
  [[nodiscard]] uint64_t bytesWritten() const override { return out.size(); }
  void pauseReading() override { paused = true; }
  void resumeReading() override { paused = false; }
  void closeTransport(bool) override { closed = true; }
  [[nodiscard]] const std::string& peerAddress() const override { return peer; }
};

struct FakeRelay final : ot::relayd::RelayForBridge {
  BridgeSession* authorizing = nullptr;
  size_t attached = 0;
  std::vector<DetachOutcome> detached;
  size_t draining = 0;
  size_t streamsClosed = 0;
  bool unregistered = false;

  uint64_t registerBridge(BridgeSession*) override { return kKey; }
  void unregisterBridge(uint64_t key) override {
    CHECK(key == kKey);
    unregistered = true;
  }
  [[nodiscard]] std::string newBridgeId(uint64_t key) const override {
    return "br_test_" + std::to_string(key);
  }
  void authorizeAttach(BridgeSession* bridge) override { authorizing = bridge; }
  void attachFailed(const BridgeSession&) override {}
  void bridgeAttached(BridgeSession*) override { ++attached; }
  void bridgeDetached(BridgeSession*, DetachOutcome reason) override { detached.push_back(reason); }
  void bridgeDraining(const std::string& tunnelId, uint64_t key) override {
    CHECK(tunnelId == "t1");
    CHECK(key == kKey);
    ++draining;
  }
  void streamClosed(const std::string&, uint64_t key, const std::string&, uint64_t,
                    uint64_t) override {
    CHECK(key == kKey);
    ++streamsClosed;
  }
};

// A visitor as its bridge drives it: what it delivers it holds as written to its socket (counted
// against the bridge's budget) until the test lets the visitor take it.
struct FakeStream final : StreamForBridge {
  BridgeForStream* bridge = nullptr;
  uint32_t id = 0;
  std::vector<uint8_t> hello;
  size_t delivered = 0;
  size_t pending = 0;
  uint64_t acked = 0;
  uint64_t sendCredit = 0;
  bool ended = false;
  bool reset = false;
  bool paused = false;
  std::optional<bridge::ResetReason> abortedWith;
  bool abortNotified = false;
  bool finished = false;

  void start(BridgeForStream* to, uint32_t connId, std::vector<uint8_t> bytes) override {
    bridge = to;
    id = connId;
    hello = std::move(bytes);
  }
  std::vector<std::string>* events = nullptr;  // deliveries and ends, in order, when set

  void deliver(std::span<const uint8_t> payload) override {
    delivered += payload.size();
    pending += payload.size();
    bridge->visitorBuffered(static_cast<int64_t>(payload.size()));
    if (events != nullptr) events->push_back(std::to_string(id) + " data " + textOf(payload));
  }
  void deliverAll(std::span<const std::span<const uint8_t>> payloads) override {
    std::string text;
    for (const auto payload : payloads) {
      delivered += payload.size();
      pending += payload.size();
      bridge->visitorBuffered(static_cast<int64_t>(payload.size()));
      text += textOf(payload);
    }
    if (events != nullptr) {
      events->push_back(std::to_string(id) + " data x" + std::to_string(payloads.size()) + " " +
                        text);
    }
  }
  static std::string textOf(std::span<const uint8_t> bytes) { return {bytes.begin(), bytes.end()}; }
  void peerEnded() override {
    ended = true;
    if (events != nullptr) events->push_back(std::to_string(id) + " end");
  }
  void peerReset() override {
    reset = true;
    finish();
  }
  [[nodiscard]] bool addSendCredit(uint32_t increment) override {
    sendCredit += increment;
    return sendCredit <= 0x7FFFFFFFu;
  }
  void abort(bridge::ResetReason reason, bool notifyClient) override {
    if (finished) return;
    abortedWith = reason;
    abortNotified = notifyClient;
    if (notifyClient) bridge->sendReset(id, reason);
    finish();
  }
  void pauseForBridge() override { paused = true; }
  void resumeFromBridge() override { paused = false; }
  [[nodiscard]] uint32_t connId() const override { return id; }
  [[nodiscard]] size_t pendingToVisitor() const override { return pending; }
  [[nodiscard]] uint64_t ackedByVisitor() const override { return acked; }

  // The visitor's socket took `bytes` of what was delivered.
  void take(size_t bytes) {
    pending -= bytes;
    acked += bytes;
    bridge->visitorBuffered(-static_cast<int64_t>(bytes));
  }
  void finish() {
    if (finished) return;
    finished = true;
    if (pending > 0) bridge->visitorBuffered(-static_cast<int64_t>(pending));
    pending = 0;
    bridge->streamFinished(this, 0, delivered);
  }
};

// What the session sent, message by message.
struct Sent {
  ws::Opcode opcode = ws::Opcode::kContinuation;
  std::vector<uint8_t> payload;
  uint16_t closeCode = 0;

  [[nodiscard]] std::string text() const { return {payload.begin(), payload.end()}; }
  [[nodiscard]] bridge::Frame frame() const {
    auto decoded = bridge::decodeFrame(payload);
    REQUIRE(decoded.ok());
    return decoded.value();
  }
};

struct BridgeRig : ot::test::ManualRelayLoop {
  FakeTransport transport;
  FakeRelay relay;
  std::deque<FakeStream> streams;  // outlive the session, which aborts what is left
  std::optional<BridgeSession> session;

  BridgeRig() { session.emplace(*context, relay, transport, "t1"); }
  ~BridgeRig() {
    session.reset();
    CHECK(relay.unregistered);
  }
  BridgeRig(const BridgeRig&) = delete;
  BridgeRig& operator=(const BridgeRig&) = delete;

  // The client's bytes: one masked WebSocket frame.
  void fromClient(ws::Opcode opcode, std::span<const uint8_t> payload) {
    std::vector<uint8_t> bytes = ws::buildFrame(opcode, payload, ws::MaskKey{9, 8, 7, 6});
    session->onPlaintext(bytes);
  }
  void frameFromClient(const std::vector<uint8_t>& frame) {
    fromClient(ws::Opcode::kBinary, frame);
  }
  void dataFromClient(uint32_t connId, size_t bytes) {
    while (bytes > 0) {
      const size_t chunk = std::min(bytes, bridge::kMaxDataPayload);
      frameFromClient(bridge::encodeData(connId, std::vector<uint8_t>(chunk, 'd')));
      bytes -= chunk;
    }
  }
  void attach() {
    bridge::AttachRequest request;
    request.token = "secret-token";
    const std::string text = bridge::serializeAttach(request);
    fromClient(ws::Opcode::kText, std::span<const uint8_t>(
                                      reinterpret_cast<const uint8_t*>(text.data()), text.size()));
    REQUIRE(relay.authorizing == &*session);
    CHECK(transport.paused);
    session->attachAllowed(64);
    REQUIRE(session->attached());
    CHECK_FALSE(transport.paused);
  }
  FakeStream& open() {
    FakeStream& stream = streams.emplace_back();
    REQUIRE(session->openStream(&stream, "", "203.0.113.5:4000", {'h', 'i'}));
    REQUIRE(stream.bridge == &*session);
    return stream;
  }
  // A stream whose deliveries and ends are written to `events`, in the order they reach it.
  FakeStream& openRecorded(std::vector<std::string>& events) {
    FakeStream& stream = open();
    stream.events = &events;
    return stream;
  }
  // Nine streams sent a whole window each: one window past the bridge's budget, so it stops
  // reading and its stall wait starts.
  std::vector<FakeStream*> fillPastBudget() {
    std::vector<FakeStream*> all;
    for (size_t i = 0; i < 9; ++i) {
      FakeStream& stream = open();
      all.push_back(&stream);
      dataFromClient(stream.id, bridge::kRelayWindow);
    }
    REQUIRE(transport.paused);
    return all;
  }
  // Bridge frames as the client sends them in one go: each a masked binary WebSocket message.
  static std::vector<uint8_t> clientBytes(std::initializer_list<std::vector<uint8_t>> frames) {
    const ws::MaskKey mask{1, 2, 3, 4};
    std::vector<uint8_t> input;
    for (const auto& frame : frames) {
      const auto bytes = ws::buildFrame(ws::Opcode::kBinary, frame, mask);
      input.insert(input.end(), bytes.begin(), bytes.end());
    }
    return input;
  }
  std::vector<Sent> sent() const {
    std::vector<uint8_t> bytes = transport.out;
    ws::MessageReader reader(ws::Role::kClient, 1 << 20);
    std::vector<Sent> out;
    std::span<uint8_t> input(bytes);
    for (;;) {
      ws::ReadStep step = reader.next(input);
      input = input.subspan(step.consumed);
      if (step.event == ws::ReadEvent::kNeedMore || step.event == ws::ReadEvent::kError) break;
      out.push_back(Sent{step.opcode, std::move(step.payload), step.closeCode});
    }
    return out;
  }
  // The close the session sent, 0 if none.
  uint16_t closeSent() const {
    for (const Sent& message : sent()) {
      if (message.opcode == ws::Opcode::kClose) return message.closeCode;
    }
    return 0;
  }
  std::vector<bridge::Frame> streamFrames(std::vector<Sent>& keep) const {
    keep = sent();
    std::vector<bridge::Frame> frames;
    for (const Sent& message : keep) {
      if (message.opcode == ws::Opcode::kBinary) frames.push_back(message.frame());
    }
    return frames;
  }
  void advance(int64_t ms) {
    clock->advance(ms);
    context->wheel.advance(context->nowMs());
  }
  // Time passing as on the loop: the wheel advanced every tick.
  void runFor(int64_t ms) {
    const auto tick = static_cast<int64_t>(context->wheel.tickMs());
    for (int64_t passed = 0; passed < ms; passed += tick) advance(std::min(tick, ms - passed));
  }
  size_t pingsSent() const {
    const std::vector<Sent> all = sent();
    return static_cast<size_t>(std::count_if(all.begin(), all.end(), [](const Sent& message) {
      return message.opcode == ws::Opcode::kPing;
    }));
  }
};

}  // namespace

TEST_CASE_FIXTURE(BridgeRig,
                  "bridge session: the client may send a stream its window, and no byte more") {
  attach();
  FakeStream& stream = open();
  dataFromClient(stream.id, bridge::kRelayWindow);
  CHECK(stream.delivered == bridge::kRelayWindow);
  CHECK(closeSent() == 0);
  dataFromClient(stream.id, 1);
  CHECK(closeSent() == ws::kCloseProtocolError);
  CHECK(stream.delivered == bridge::kRelayWindow);
  CHECK(stream.abortedWith.has_value());
  REQUIRE(relay.detached.size() == 1);
  CHECK(relay.detached[0] == DetachOutcome::kServerClose);
}

TEST_CASE_FIXTURE(
    BridgeRig,
    "bridge session: credit the visitor grants goes to the client and widens its window") {
  attach();
  FakeStream& stream = open();
  dataFromClient(stream.id, bridge::kRelayWindow);
  stream.take(bridge::kRelayWindow);
  stream.bridge->sendCredit(stream.id, 100'000);
  std::vector<Sent> keep;
  const auto frames = streamFrames(keep);
  REQUIRE(frames.size() == 2);
  CHECK(frames[0].kind == bridge::FrameKind::kOpen);
  CHECK(frames[1].kind == bridge::FrameKind::kCredit);
  CHECK(frames[1].connId == stream.id);
  CHECK(frames[1].increment == 100'000);
  dataFromClient(stream.id, 100'000);
  CHECK(closeSent() == 0);
  CHECK(stream.delivered == bridge::kRelayWindow + 100'000);
  dataFromClient(stream.id, 1);
  CHECK(closeSent() == ws::kCloseProtocolError);
}

TEST_CASE_FIXTURE(BridgeRig,
                  "bridge session: the client's credit reaches its stream; past 2^31 - 1 it is a "
                  "protocol error") {
  attach();
  FakeStream& stream = open();
  frameFromClient(bridge::encodeCredit(stream.id, 5000));
  CHECK(stream.sendCredit == 5000);
  CHECK(closeSent() == 0);
  frameFromClient(bridge::encodeCredit(stream.id, 0x7FFFFFFFu));
  CHECK(closeSent() == ws::kCloseProtocolError);
}

TEST_CASE_FIXTURE(BridgeRig,
                  "bridge session: past its visitors' budget the bridge stops reading the client, "
                  "and reads again under it") {
  attach();
  std::vector<FakeStream*> open8;
  const size_t needed = ot::relayd::kBridgeVisitorBudget / bridge::kRelayWindow;  // 8 full windows
  for (size_t i = 0; i < needed; ++i) {
    FakeStream& stream = open();
    open8.push_back(&stream);
    dataFromClient(stream.id, bridge::kRelayWindow);
  }
  // Exactly at the budget: still reading.
  CHECK_FALSE(transport.paused);
  FakeStream& last = open();
  dataFromClient(last.id, 1);
  CHECK(transport.paused);
  // One visitor takes what it was sent: the next check finds the bridge under budget.
  open8[0]->take(bridge::kRelayWindow);
  CHECK(transport.paused);  // visitors taking data do not wake the bridge by themselves
  last.finish();            // a stream ending does
  CHECK_FALSE(transport.paused);
  CHECK(closeSent() == 0);
}

TEST_CASE_FIXTURE(BridgeRig,
                  "bridge session: over budget, the visitors that took nothing are reset as "
                  "too_slow after one wait") {
  attach();
  const std::vector<FakeStream*> all = fillPastBudget();
  advance(static_cast<int64_t>(ot::relayd::kSlowVisitorWaitMs) / 2);
  // The first five are slow but moving: 64 KiB each during the wait.
  for (size_t i = 0; i < 5; ++i) all[i]->take(ot::relayd::kSlowVisitorProgressBytes);
  advance(static_cast<int64_t>(ot::relayd::kSlowVisitorWaitMs) / 2 - 300);
  for (FakeStream* stream : all) CHECK_FALSE(stream->abortedWith.has_value());
  advance(300 + context->wheel.tickMs());
  for (size_t i = 0; i < 9; ++i) {
    CAPTURE(i);
    if (i < 5) {
      CHECK_FALSE(all[i]->abortedWith.has_value());
    } else {
      REQUIRE(all[i]->abortedWith.has_value());
      CHECK(*all[i]->abortedWith == bridge::ResetReason::kTooSlow);
      CHECK(all[i]->abortNotified);
    }
  }
  CHECK(metrics.backpressureStall.Value() == 1);
  CHECK(metrics.backpressureReset.Value() == 4);
  CHECK_FALSE(transport.paused);  // what is left is under budget
  CHECK(session->streamCount() == 5);
  std::vector<Sent> keep;
  size_t resets = 0;
  for (const auto& frame : streamFrames(keep)) {
    if (frame.kind == bridge::FrameKind::kReset && frame.reason == bridge::ResetReason::kTooSlow)
      ++resets;
  }
  CHECK(resets == 4);
}

TEST_CASE_FIXTURE(BridgeRig,
                  "bridge session: a visitor that arrived during a wait is not judged by it (a "
                  "new visitor's first bytes are not 'taking nothing')") {
  attach();
  const std::vector<FakeStream*> stalled = fillPastBudget();
  advance(static_cast<int64_t>(ot::relayd::kSlowVisitorWaitMs) / 2);
  stalled[8]->finish();  // under budget again: the bridge reads, the wait stays armed
  REQUIRE_FALSE(transport.paused);
  FakeStream& late = open();
  dataFromClient(late.id, 4096);  // its TLS ServerHello, written and not yet confirmed taken
  advance(static_cast<int64_t>(ot::relayd::kSlowVisitorWaitMs) / 2 + context->wheel.tickMs());
  CHECK(metrics.backpressureStall.Value() == 1);
  for (size_t i = 0; i < 8; ++i) {
    CAPTURE(i);
    REQUIRE(stalled[i]->abortedWith.has_value());
    CHECK(*stalled[i]->abortedWith == bridge::ResetReason::kTooSlow);
  }
  CHECK_FALSE(late.abortedWith.has_value());
  CHECK(metrics.backpressureReset.Value() == 8);
  CHECK(session->streamCount() == 1);
}

TEST_CASE_FIXTURE(
    BridgeRig,
    "bridge session: the client's end and reset reach the stream; data after end is an error") {
  attach();
  FakeStream& ending = open();
  FakeStream& resetting = open();
  frameFromClient(bridge::encodeEnd(ending.id));
  CHECK(ending.ended);
  CHECK(session->streamCount() == 2);  // half closed: the visitor may still send
  frameFromClient(bridge::encodeReset(resetting.id, bridge::ResetReason::kConnectFailed));
  CHECK(resetting.reset);
  CHECK(session->streamCount() == 1);
  CHECK(relay.streamsClosed == 1);
  CHECK(closeSent() == 0);
  // A frame for a stream closed here is ignored; data after end is not.
  dataFromClient(resetting.id, 10);
  CHECK(closeSent() == 0);
  dataFromClient(ending.id, 10);
  CHECK(closeSent() == ws::kCloseProtocolError);
}

TEST_CASE_FIXTURE(BridgeRig,
                  "bridge session: a stream's end and reset go to the client as frames") {
  attach();
  FakeStream& stream = open();
  stream.bridge->sendData(stream.id, std::vector<uint8_t>(10, 'v'));
  stream.bridge->sendEnd(stream.id);
  stream.bridge->sendReset(stream.id, bridge::ResetReason::kIdleTimeout);
  std::vector<Sent> keep;
  const auto frames = streamFrames(keep);
  REQUIRE(frames.size() == 4);
  CHECK(frames[0].kind == bridge::FrameKind::kOpen);
  CHECK(frames[1].kind == bridge::FrameKind::kData);
  CHECK(frames[1].payload.size() == 10);
  CHECK(frames[2].kind == bridge::FrameKind::kEnd);
  CHECK(frames[2].connId == stream.id);
  CHECK(frames[3].kind == bridge::FrameKind::kReset);
  CHECK(frames[3].connId == stream.id);
  CHECK(frames[3].reason == bridge::ResetReason::kIdleTimeout);
}

TEST_CASE_FIXTURE(BridgeRig,
                  "bridge session: a drain waits for the open streams, then closes with 1012") {
  attach();
  FakeStream& first = open();
  FakeStream& second = open();
  session->drain();
  CHECK(relay.draining == 1);
  const auto messages = sent();
  bool drainSent = false;
  for (const Sent& message : messages) {
    if (message.opcode == ws::Opcode::kText && message.text().find("drain") != std::string::npos)
      drainSent = true;
  }
  CHECK(drainSent);
  // Streams open: not closed, no new stream.
  CHECK(closeSent() == 0);
  FakeStream extra;
  CHECK_FALSE(session->openStream(&extra, "", "203.0.113.5:4000", {}));
  CHECK_FALSE(first.abortedWith.has_value());
  dataFromClient(first.id, 100);  // still carried
  CHECK(first.delivered == 100);
  first.finish();
  CHECK(closeSent() == 0);
  second.finish();
  CHECK(closeSent() == ws::kCloseServiceRestart);
  REQUIRE(relay.detached.size() == 1);
  CHECK(relay.detached[0] == DetachOutcome::kDrain);
}

TEST_CASE_FIXTURE(
    BridgeRig,
    "bridge session heartbeat: a bridge that carries traffic is never pinged; a "
    "silent one is, once per heartbeat of silence, and retired when it stays silent") {
  attach();
  const auto heartbeat = static_cast<int64_t>(config.bridgeHeartbeatMs);
  const auto tick = static_cast<int64_t>(context->wheel.tickMs());
  REQUIRE(heartbeat == 15'000);
  FakeStream& stream = open();
  // A minute with a frame from the client every 10 s (credit, a pong, a text message): life.
  const std::string text = "ignored after attach";
  for (int i = 0; i < 6; ++i) {
    runFor(10'000);
    if (i % 3 == 0) frameFromClient(bridge::encodeCredit(stream.id, 1));
    if (i % 3 == 1) fromClient(ws::Opcode::kPong, {});
    if (i % 3 == 2)
      fromClient(
          ws::Opcode::kText,
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  }
  CHECK(pingsSent() == 0);
  // Silent for a heartbeat: one ping (the wheel fires within a tick or two after it).
  runFor(heartbeat - tick);
  CHECK(pingsSent() == 0);
  runFor(3 * tick);
  CHECK(pingsSent() == 1);
  // The client answers at once and falls silent again: pinged again a heartbeat after its answer,
  // not only when the retirement is due.
  fromClient(ws::Opcode::kPong, {});
  runFor(heartbeat - tick);
  CHECK(pingsSent() == 1);
  runFor(3 * tick);
  CHECK(pingsSent() == 2);
  // No answer: no second ping while one is out, and retired at the idle timeout plus a heartbeat
  // (45 s) after the client's last frame.
  const auto retireAfter = static_cast<int64_t>(config.bridgeIdleTimeoutMs) + heartbeat;
  runFor(retireAfter - (heartbeat + 2 * tick) - tick);
  CHECK(pingsSent() == 2);
  CHECK(closeSent() == 0);
  runFor(3 * tick);
  CHECK(pingsSent() == 2);
  CHECK(closeSent() == ws::kCloseGoingAway);
  REQUIRE(relay.detached.size() == 1);
  CHECK(relay.detached[0] == DetachOutcome::kIdleRetire);
}

TEST_CASE_FIXTURE(BridgeRig, "bridge session: an attached bridge keeps no copy of its token") {
  attach();
  CHECK(session->attachRequest().token.empty());
  CHECK(session->attachRequest().routes == std::vector<std::string>{""});
}

TEST_CASE_FIXTURE(BridgeRig,
                  "bridge session: a stream's data frames read together reach it in one "
                  "delivery, before anything that follows them") {
  attach();
  std::vector<std::string> events;
  FakeStream& a = openRecorded(events);
  FakeStream& b = openRecorded(events);
  const auto text = [](std::string_view t) { return std::vector<uint8_t>(t.begin(), t.end()); };
  // One read: a, a, a's end, b, a, b, b.
  std::vector<uint8_t> input =
      clientBytes({bridge::encodeData(a.id, text("one")), bridge::encodeData(a.id, text("two")),
                   bridge::encodeEnd(a.id), bridge::encodeData(b.id, text("b1")),
                   bridge::encodeData(b.id, text("b2")), bridge::encodeData(a.id, text("late")),
                   bridge::encodeData(b.id, text("b3"))});
  session->onPlaintext(input);
  // "late" after a's end is a protocol error: the bridge closes, and b's b1 b2 were delivered
  // before it (b3 is never read).
  const std::vector<std::string> expected = {std::to_string(a.id) + " data x2 onetwo",
                                             std::to_string(a.id) + " end",
                                             std::to_string(b.id) + " data x2 b1b2"};
  CHECK(events == expected);
  CHECK(closeSent() == ws::kCloseProtocolError);
}

TEST_CASE_FIXTURE(BridgeRig,
                  "bridge session: interleaved streams are delivered in order, and a read's "
                  "last frames before it ends") {
  attach();
  std::vector<std::string> events;
  FakeStream& a = openRecorded(events);
  FakeStream& b = openRecorded(events);
  std::vector<uint8_t> input = clientBytes({bridge::encodeData(a.id, std::vector<uint8_t>{'x'}),
                                            bridge::encodeData(b.id, std::vector<uint8_t>{'y'}),
                                            bridge::encodeData(a.id, std::vector<uint8_t>{'z'})});
  session->onPlaintext(input);
  const std::vector<std::string> expected = {std::to_string(a.id) + " data x1 x",
                                             std::to_string(b.id) + " data x1 y",
                                             std::to_string(a.id) + " data x1 z"};
  CHECK(events == expected);
  CHECK(closeSent() == 0);
}

TEST_CASE_FIXTURE(BridgeRig,
                  "bridge session: a visitor's read leaves as its data frames in one write") {
  attach();
  FakeStream& stream = open();
  const size_t writesBefore = transport.writes;
  const std::vector<uint8_t> read(bridge::kMaxDataPayload * 2 + 100, 'r');
  stream.bridge->sendData(stream.id, read);
  CHECK(transport.writes == writesBefore + 1);
  std::vector<Sent> keep;
  const auto frames = streamFrames(keep);
  REQUIRE(frames.size() == 4);  // open, then three data frames
  CHECK(frames[1].payload.size() == bridge::kMaxDataPayload);
  CHECK(frames[2].payload.size() == bridge::kMaxDataPayload);
  CHECK(frames[3].payload.size() == 100);
}

TEST_CASE_FIXTURE(BridgeRig,
                  "bridge session: a frame cut across two reads goes out with the frames that "
                  "follow it in the second") {
  attach();
  std::vector<std::string> events;
  FakeStream& stream = openRecorded(events);
  std::vector<uint8_t> input =
      clientBytes({bridge::encodeData(stream.id, std::vector<uint8_t>(40, 'a')),
                   bridge::encodeData(stream.id, std::vector<uint8_t>(3, 'b'))});
  std::vector<uint8_t> first(input.begin(), input.begin() + 20);
  std::vector<uint8_t> second(input.begin() + 20, input.end());
  session->onPlaintext(first);
  CHECK(events.empty());
  session->onPlaintext(second);
  const std::vector<std::string> expected = {std::to_string(stream.id) + " data x2 " +
                                             std::string(40, 'a') + "bbb"};
  CHECK(events == expected);
}
