// A tunnel's reset through a real Relay (no controld: attaches are authorized from the cached
// record): Command reset_tunnel closes every bridge of that tunnel with 4000 "reset", counted as
// a "reset" detach, and leaves another tunnel's bridges open.
#include <doctest/doctest.h>

#include <algorithm>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "common/bridge_control.h"
#include "common/crypto.h"
#include "common/websocket_frame.h"
#include "relayd/bridge_session.h"
#include "relayd/relay.h"
#include "tests/relayd/manual_relay_loop.h"

using namespace ot::relayd;
namespace bridge = ot::bridge;
namespace ws = ot::ws;

namespace {

struct ResetTransport final : BridgeTransport {
  std::vector<uint8_t> out;
  bool closed = false;
  std::string peer = "192.0.2.10";
  void sendPlain(std::span<const uint8_t> bytes) override {
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  [[nodiscard]] size_t queuedBytes() const override { return 0; }
  [[nodiscard]] uint64_t bytesWritten() const override { return out.size(); }
  void pauseReading() override {}
  void resumeReading() override {}
  void closeTransport(bool) override { closed = true; }
  [[nodiscard]] const std::string& peerAddress() const override { return peer; }

  // Whether the session sent a close frame (server frames: unmasked) with this code and reason.
  [[nodiscard]] bool sentClose(uint16_t code, std::string_view reason) const {
    std::vector<uint8_t> frame = {0x88, static_cast<uint8_t>(2 + reason.size()),
                                  static_cast<uint8_t>(code >> 8),
                                  static_cast<uint8_t>(code & 0xFF)};
    frame.insert(frame.end(), reason.begin(), reason.end());
    return std::search(out.begin(), out.end(), frame.begin(), frame.end()) != out.end();
  }
  [[nodiscard]] bool sentAnyClose() const {
    return std::find(out.begin(), out.end(), uint8_t{0x88}) != out.end();
  }
};

v1::TunnelRecord recordOf(const std::string& id) {
  v1::TunnelRecord record;
  record.set_tunnel_id(id);
  record.set_revision(1);
  const auto digest = ot::crypto::sha256("tk_" + id);
  record.set_token_sha256(std::string(digest.begin(), digest.end()));
  record.set_cert_ready(true);
  return record;
}

struct ResetRig : ot::test::ManualRelayLoop {
  std::optional<Relay> relay;
  std::deque<ResetTransport> transports;
  std::deque<std::optional<BridgeSession>> sessions;

  ResetRig() {
    config.domain = "tunnels.test";
    ControlClientOptions control;
    control.socketPath = "/nonexistent/control.sock";
    control.machineId = "A";
    relay.emplace(*context, control);
  }
  ~ResetRig() {
    sessions.clear();
    relay->stop();
    for (int i = 0; i < 100; ++i) uv_run(&loop, UV_RUN_NOWAIT);
    relay.reset();
  }
  ResetRig(const ResetRig&) = delete;
  ResetRig& operator=(const ResetRig&) = delete;

  size_t attach(const std::string& tunnelId) {
    ResetTransport& transport = transports.emplace_back();
    auto& session = sessions.emplace_back();
    session.emplace(*context, *relay, transport, tunnelId);
    bridge::AttachRequest request;
    request.token = "tk_" + tunnelId;
    const std::string text = bridge::serializeAttach(request);
    std::vector<uint8_t> bytes = ws::buildFrame(
        ws::Opcode::kText,
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()),
        ws::MaskKey{1, 2, 3, 4});
    session->onPlaintext(bytes);
    REQUIRE(session->attached());
    return sessions.size() - 1;
  }
  [[nodiscard]] bool open(size_t i) const { return sessions[i]->attached(); }
  [[nodiscard]] double resets() const {
    return metrics.detaches[static_cast<size_t>(DetachOutcome::kReset)]->Value();
  }
};

}  // namespace

TEST_CASE_FIXTURE(ResetRig, "relay reset: closes only that tunnel's bridges, with 4000 reset") {
  relay->storeRecord(recordOf("t1"));
  relay->storeRecord(recordOf("t2"));
  const size_t a = attach("t1");
  const size_t b = attach("t1");
  const size_t other = attach("t2");
  CHECK(relay->table().bridgeCountOf("t1") == 2);

  CHECK(relay->resetTunnel("t1") == 2);
  CHECK_FALSE(open(a));
  CHECK_FALSE(open(b));
  CHECK(transports[a].sentClose(bridge::kCloseReset, bridge::kCloseResetReason));
  CHECK(transports[b].sentClose(4000, "reset"));
  CHECK(resets() == 2);
  CHECK(relay->table().bridgeCountOf("t1") == 0);
  // The record is dropped: read again on the next use.
  CHECK(relay->table().record("t1") == nullptr);

  // The other tunnel is untouched.
  CHECK(open(other));
  CHECK_FALSE(transports[other].sentAnyClose());
  CHECK(relay->table().bridgeCountOf("t2") == 1);
  CHECK(relay->table().record("t2") != nullptr);

  // Nothing left to reset: nothing closed, nothing counted.
  CHECK(relay->resetTunnel("t1") == 0);
  CHECK(resets() == 2);
}
