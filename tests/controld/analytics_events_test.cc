// controld's analytics events (controld/analytics/controld_events.h): what each builder puts in an
// event, and which relay hub reports become events (live sessions' attaches and detaches, never a
// snapshot's bridges nor a superseded session's reports).
#include <doctest/doctest.h>

#include <vector>

#include "controld/analytics/controld_events.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/relay_hub.h"

namespace ot::controld {
namespace {

namespace cv1 = ::opentunnel::control::v1;

const analytics::FieldValue* field(const analytics::Event& event, std::string_view name) {
  for (const auto& f : event.fields) {
    if (f.name == name) return &f.value;
  }
  return nullptr;
}

template <typename T>
T valueOf(const analytics::Event& event, std::string_view name) {
  const analytics::FieldValue* value = field(event, name);
  REQUIRE(value != nullptr);
  REQUIRE(std::holds_alternative<T>(*value));
  return std::get<T>(*value);
}

cv1::Hello hello(uint64_t epoch) {
  cv1::Hello message;
  message.set_machine_id("relay-a");
  message.set_epoch(epoch);
  return message;
}

BridgeEntry bridgeOf(const std::string& tunnelId, const std::string& bridgeId) {
  BridgeEntry bridge;
  bridge.bridgeId = bridgeId;
  bridge.tunnelId = tunnelId;
  bridge.routes = {"", "api"};
  bridge.profile = "http";
  bridge.maxConns = 256;
  bridge.peerAddress = "192.0.2.7";
  return bridge;
}

cv1::BridgeDetached detachedOf(const std::string& tunnelId, const std::string& bridgeId) {
  cv1::BridgeDetached detached;
  detached.set_bridge_id(bridgeId);
  detached.set_tunnel_id(tunnelId);
  detached.set_reason(cv1::DETACH_REASON_IDLE_RETIRE);
  detached.set_detached_at_unix_ms(1'000);
  return detached;
}

}  // namespace

TEST_CASE("analytics events: tunnels and certificates") {
  const analytics::Event created = tunnelCreatedEvent("abc", true, 5);
  CHECK(created.type == analytics::type::kTunnelCreated);
  CHECK(created.tunnel == "abc");
  CHECK(created.atUnixMs == 5);
  CHECK(valueOf<bool>(created, "chosen_id"));
  CHECK(tunnelDeletedEvent("abc", 6).fields.empty());

  Job job;
  job.id = "cert-1";
  job.kind = JobKind::kRenew;
  job.tunnelId = "abc";
  job.attempts = 2;
  job.lastError = std::string(500, 'x');
  const auto issued = certificateEvent(job, JobOutcome::kDone, 1.5, 7);
  REQUIRE(issued.has_value());
  CHECK(issued->type == analytics::type::kCertificateIssued);
  CHECK(valueOf<std::string>(*issued, "kind") == "renew");
  CHECK(valueOf<int64_t>(*issued, "attempt") == 2);
  CHECK(valueOf<int64_t>(*issued, "duration_ms") == 1500);
  CHECK(field(*issued, "error") == nullptr);

  const auto retrying = certificateEvent(job, JobOutcome::kRetry, 0.1, 7);
  REQUIRE(retrying.has_value());
  CHECK(retrying->type == analytics::type::kCertificateFailed);
  CHECK(valueOf<bool>(*retrying, "retrying"));
  CHECK_FALSE(valueOf<bool>(*retrying, "refused"));
  CHECK(valueOf<std::string>(*retrying, "error").size() == 200);
  const auto refused = certificateEvent(job, JobOutcome::kRefused, 0, 7);
  REQUIRE(refused.has_value());
  CHECK_FALSE(valueOf<bool>(*refused, "retrying"));
  CHECK(valueOf<bool>(*refused, "refused"));
  CHECK(certificateEvent(job, JobOutcome::kFailed, 0, 7).has_value());
  // No attempt's result: no event.
  CHECK_FALSE(certificateEvent(job, JobOutcome::kAbandoned, 0, 7).has_value());
  CHECK_FALSE(certificateEvent(job, JobOutcome::kDeferred, 0, 7).has_value());
  CHECK_FALSE(certificateEvent(job, JobOutcome::kDropped, 0, 7).has_value());
}

TEST_CASE("analytics events: bridges, without the client's address") {
  const analytics::Event attached = bridgeAttachedEvent(bridgeOf("abc", "b1"), 9);
  CHECK(attached.type == analytics::type::kBridgeAttached);
  CHECK(attached.tunnel == "abc");
  CHECK(valueOf<std::string>(attached, "bridge") == "b1");
  CHECK(valueOf<int64_t>(attached, "routes") == 2);
  CHECK(valueOf<std::string>(attached, "profile") == "http");
  CHECK(valueOf<int64_t>(attached, "max_conns") == 256);
  for (const auto& f : attached.fields) {
    if (const auto* text = std::get_if<std::string>(&f.value)) CHECK(*text != "192.0.2.7");
  }
  const analytics::Event detached = bridgeDetachedEvent(detachedOf("abc", "b1"), 9);
  CHECK(detached.atUnixMs == 1'000);  // relayd's time
  CHECK(valueOf<std::string>(detached, "reason") == "idle_retire");
  CHECK(detachReasonWord(cv1::DETACH_REASON_CLIENT_CLOSE) == "client_close");
  CHECK(detachReasonWord(cv1::DETACH_REASON_UNSPECIFIED) == "unspecified");
  CHECK(detachReasonWord(static_cast<cv1::DetachReason>(999)) == "unspecified");
}

TEST_CASE("analytics events: the hub reports live attaches and detaches, not snapshots") {
  BridgeRegistry registry;
  std::vector<analytics::Event> events;
  RelayHubOptions options;
  options.nowMs = [] { return int64_t{42}; };
  options.events = [&](analytics::Event event) { events.push_back(std::move(event)); };
  RelayHub hub(registry, std::move(options));
  const auto session = hub.open(hello(1), [] {});
  REQUIRE(session != nullptr);
  hub.snapshotComplete(session, {bridgeOf("old", "b0")});
  CHECK(events.empty());  // already attached before this session: reported when it attached
  hub.bridgeAttached(session, bridgeOf("abc", "b1"));
  hub.bridgeDetached(session, detachedOf("abc", "b1"));
  REQUIRE(events.size() == 2);
  CHECK(events[0].type == analytics::type::kBridgeAttached);
  CHECK(events[0].atUnixMs == 42);
  CHECK(events[1].type == analytics::type::kBridgeDetached);
  CHECK(registry.bridgeCount("abc") == 0);
  // A reconnect of the same relay supersedes the session: its late reports change nothing.
  const auto next = hub.open(hello(1), [] {});
  REQUIRE(next != nullptr);
  hub.bridgeAttached(session, bridgeOf("abc", "b2"));
  hub.bridgeDetached(session, detachedOf("abc", "b2"));
  CHECK(events.size() == 2);
  hub.shutdown();
}

}  // namespace ot::controld
