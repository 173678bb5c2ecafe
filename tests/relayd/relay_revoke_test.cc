// Revocation through a real Relay (no controld: attaches are authorized from the cached record):
// bridges attached with origins' derived credentials and with the tunnel token; a newer record
// that drops an origin, then one that rotates the credentials, closes exactly the bridges whose
// credential is gone, with 1008 "credential revoked", counted as a "revoked" detach.
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

struct FakeTransport final : BridgeTransport {
  std::vector<uint8_t> out;
  bool closed = false;
  std::string peer = "192.0.2.9";
  void sendPlain(std::span<const uint8_t> bytes) override {
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  [[nodiscard]] size_t queuedBytes() const override { return 0; }
  [[nodiscard]] uint64_t bytesWritten() const override { return out.size(); }
  void pauseReading() override {}
  void resumeReading() override {}
  void closeTransport(bool) override { closed = true; }
  [[nodiscard]] const std::string& peerAddress() const override { return peer; }

  // Whether the session sent a close frame with `code` and `reason` (server frames: unmasked).
  [[nodiscard]] bool sentClose(uint16_t code, const std::string& reason) const {
    std::vector<uint8_t> frame = {0x88, static_cast<uint8_t>(2 + reason.size()),
                                  static_cast<uint8_t>(code >> 8),
                                  static_cast<uint8_t>(code & 0xFF)};
    frame.insert(frame.end(), reason.begin(), reason.end());
    return std::search(out.begin(), out.end(), frame.begin(), frame.end()) != out.end();
  }
};

std::string revokeSha256(std::string_view secret) {
  const auto digest = ot::crypto::sha256(secret);
  return {digest.begin(), digest.end()};
}

v1::TunnelRecord recordOf(uint64_t revision,
                          const std::vector<std::pair<std::string, std::string>>& origins) {
  v1::TunnelRecord record;
  record.set_tunnel_id("t1");
  record.set_revision(revision);
  record.set_token_sha256(revokeSha256("tk_owner"));
  record.set_cert_ready(true);
  for (const auto& [name, credential] : origins) {
    auto* origin = record.add_origins();
    origin->set_name(name);
    origin->set_credential_sha256(revokeSha256(credential));
  }
  return record;
}

struct RevokeRig : ot::test::ManualRelayLoop {
  std::optional<Relay> relay;
  std::deque<FakeTransport> transports;
  std::deque<std::optional<BridgeSession>> sessions;

  RevokeRig() {
    config.domain = "tunnels.test";
    ControlClientOptions control;
    control.socketPath = "/nonexistent/control.sock";
    control.machineId = "A";
    relay.emplace(*context, control);
  }
  ~RevokeRig() {
    sessions.clear();
    relay->stop();
    for (int i = 0; i < 100; ++i) uv_run(&loop, UV_RUN_NOWAIT);
    relay.reset();
  }
  RevokeRig(const RevokeRig&) = delete;
  RevokeRig& operator=(const RevokeRig&) = delete;

  size_t attach(const std::string& token, const std::string& origin) {
    FakeTransport& transport = transports.emplace_back();
    auto& session = sessions.emplace_back();
    session.emplace(*context, *relay, transport, "t1");
    bridge::AttachRequest request;
    request.token = token;
    request.origin = origin;
    const std::string text = bridge::serializeAttach(request);
    std::vector<uint8_t> bytes = ws::buildFrame(
        ws::Opcode::kText,
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()),
        ws::MaskKey{9, 8, 7, 6});
    session->onPlaintext(bytes);
    REQUIRE(session->attached());
    return sessions.size() - 1;
  }
  [[nodiscard]] bool open(size_t i) const { return sessions[i]->attached(); }
  [[nodiscard]] double revoked() const {
    return metrics.detaches[static_cast<size_t>(DetachOutcome::kRevoked)]->Value();
  }
};

}  // namespace

TEST_CASE_FIXTURE(RevokeRig, "relay revocation: only bridges whose derived credential is gone") {
  relay->storeRecord(recordOf(2, {{"alpha", "oc_alpha_1"}, {"bravo", "oc_bravo_1"}}));
  const size_t alpha = attach("oc_alpha_1", "alpha");
  const size_t bravo = attach("oc_bravo_1", "bravo");
  const size_t ownerAlpha = attach("tk_owner", "alpha");  // the token under a named origin
  const size_t ownerBravo = attach("tk_owner", "bravo");
  CHECK(relay->table().bridgeCountOf("t1") == 4);

  // An older revision changes nothing.
  relay->storeRecord(recordOf(1, {{"alpha", "oc_alpha_1"}}));
  CHECK(open(bravo));

  // bravo removed: its derived bridge closes at once; the token's bravo bridge stays.
  relay->storeRecord(recordOf(3, {{"alpha", "oc_alpha_1"}}));
  CHECK_FALSE(open(bravo));
  CHECK(transports[bravo].sentClose(ws::kClosePolicyViolation, "credential revoked"));
  CHECK(open(alpha));
  CHECK(open(ownerAlpha));
  CHECK(open(ownerBravo));
  CHECK(revoked() == 1);
  CHECK(relay->table().bridgeCountOf("t1") == 3);

  // A rotation: alpha's derived credential changes; the token bridges stay.
  relay->storeRecord(recordOf(4, {{"alpha", "oc_alpha_2"}}));
  CHECK_FALSE(open(alpha));
  CHECK(transports[alpha].sentClose(ws::kClosePolicyViolation, "credential revoked"));
  CHECK(open(ownerAlpha));
  CHECK(open(ownerBravo));
  CHECK_FALSE(transports[ownerAlpha].sentClose(ws::kClosePolicyViolation, "credential revoked"));
  CHECK(revoked() == 2);

  // The new credential attaches.
  const size_t alphaAgain = attach("oc_alpha_2", "alpha");
  CHECK(open(alphaAgain));
}

TEST_CASE_FIXTURE(RevokeRig, "relay revocation: attached answers protocol 2") {
  relay->storeRecord(recordOf(1, {}));
  const size_t owner = attach("tk_owner", "");
  const std::string out(transports[owner].out.begin(), transports[owner].out.end());
  CHECK(out.find("\"protocol\":2") != std::string::npos);
}

TEST_CASE("relay revocation: the record's balancing, hold and generation reach the cache") {
  v1::TunnelRecord record = recordOf(1, {{"alpha", "oc_alpha_1"}});
  CachedRecord cached = toCachedRecord(record);
  CHECK(cached.balancing == Balancing::kSpread);       // unset: spread, as before pools
  CHECK(cached.stickyHoldMs == kDefaultStickyHoldMs);  // 0: the default
  CHECK(cached.credentialGeneration == 0);
  REQUIRE(cached.origins.size() == 1);
  record.set_balancing(v1::BALANCING_PRIORITY);
  record.set_sticky_hold_ms(2'500);
  record.set_credential_generation(7);
  cached = toCachedRecord(record);
  CHECK(cached.balancing == Balancing::kPriority);
  CHECK(cached.stickyHoldMs == 2'500);
  CHECK(cached.credentialGeneration == 7);
  record.set_balancing(v1::BALANCING_SPREAD);
  CHECK(toCachedRecord(record).balancing == Balancing::kSpread);
}
