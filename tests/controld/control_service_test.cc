// controld's RelayControl calls over a real gRPC server on a unix socket (see
// control_harness.h): AuthorizeAttach in the contract's order of checks, unary and carried by the
// Session (AuthorizeBatch, answered alike), FetchTunnel, and all of them while storage is down.
#include <google/protobuf/util/message_differencer.h>

#include <mutex>
#include <optional>

#include "tests/controld/control_harness.h"

namespace ot::controld {
namespace {

using testing::eventually;
using testing::expectSentinel;
using testing::Harness;
using testing::HarnessOptions;
using testing::kNowMs;
using testing::makeBridge;
using testing::readyTunnel;
using testing::RelayClient;
using testing::sha256Bytes;

cv1::AuthorizeAttachResponse authorize(cv1::RelayControl::Stub& stub,
                                       const cv1::AuthorizeAttachRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(testing::soon());
  cv1::AuthorizeAttachResponse response;
  const grpc::Status status = stub.AuthorizeAttach(&context, request, &response);
  REQUIRE_MESSAGE(status.ok(), status.error_message());
  return response;
}

cv1::AuthorizeAttachRequest attachRequest(const std::string& tunnelId,
                                          std::vector<std::string> routes = {"", "api"}) {
  cv1::AuthorizeAttachRequest request;
  request.set_tunnel_id(tunnelId);
  request.set_token("token-" + tunnelId);
  for (auto& route : routes) request.add_routes(std::move(route));
  request.set_origin("laptop");
  request.set_bridge_id("b-new");
  request.set_peer_address("192.0.2.10:40000");
  request.set_max_conns(256);
  return request;
}

// Sends the requests as one AuthorizeBatch (IDs 100, 101, ...) and reads until each is answered;
// the answers by request index. Other messages on the stream are skipped.
std::vector<cv1::AuthorizeAttachResponse> authorizeOnSession(
    testing::RelayClient& relay, const std::vector<cv1::AuthorizeAttachRequest>& requests,
    size_t* answerMessages = nullptr) {
  cv1::RelayMessage batch;
  for (size_t i = 0; i < requests.size(); ++i) {
    cv1::AuthorizeItem* item = batch.mutable_authorize()->add_requests();
    item->set_request_id(100 + i);
    *item->mutable_request() = requests[i];
  }
  relay.write(batch);
  std::vector<std::optional<cv1::AuthorizeAttachResponse>> answers(requests.size());
  size_t answered = 0;
  size_t messages = 0;
  while (answered < requests.size()) {
    const cv1::ControlMessage message = relay.read();
    if (!message.has_authorized()) continue;
    ++messages;
    for (const auto& answer : message.authorized().answers()) {
      REQUIRE(answer.request_id() >= 100);
      const size_t index = answer.request_id() - 100;
      REQUIRE(index < answers.size());
      REQUIRE_FALSE(answers[index].has_value());  // answered once
      answers[index] = answer.response();
      ++answered;
    }
  }
  if (answerMessages != nullptr) *answerMessages = messages;
  std::vector<cv1::AuthorizeAttachResponse> out;
  for (auto& answer : answers) out.push_back(*answer);
  return out;
}

std::vector<std::string> numberedRoutes(int from, int count) {
  std::vector<std::string> routes;
  for (int i = from; i < from + count; ++i) routes.push_back("r" + std::to_string(i));
  return routes;
}

TEST_CASE("control: AuthorizeAttach") {
  Harness h;
  const StoredTunnel alpha = h.addTunnel(readyTunnel("alpha"));
  TunnelRecord gone = readyTunnel("gone");
  gone.deletedAtMs = kNowMs - 1;
  h.addTunnel(gone);
  auto stub = h.stub();
  cv1::AuthorizeAttachRequest request = attachRequest("alpha");

  SUBCASE("the tunnel's token: OK with the record") {
    const auto response = authorize(*stub, request);
    CHECK(response.result() == cv1::ATTACH_RESULT_OK);
    REQUIRE(response.has_record());
    CHECK(response.record().tunnel_id() == "alpha");
    CHECK(response.record().revision() == static_cast<uint64_t>(alpha.revision));
    CHECK(response.record().token_sha256() == sha256Bytes("token-alpha"));
    CHECK(response.record().hostname() == "alpha.tunnels.test");
    CHECK(response.record().cert_ready());
    CHECK(response.record().certificate_state() == cv1::CERTIFICATE_STATE_READY);
  }
  SUBCASE("a wrong token") {
    request.set_token("token-alphx");
    const auto response = authorize(*stub, request);
    CHECK(response.result() == cv1::ATTACH_RESULT_BAD_TOKEN);
    CHECK(response.message() == "unknown tunnel or wrong token");
    CHECK_FALSE(response.has_record());
  }
  SUBCASE("an empty token") {
    request.set_token("");
    CHECK(authorize(*stub, request).result() == cv1::ATTACH_RESULT_BAD_TOKEN);
  }
  SUBCASE("an unknown tunnel, a malformed id, a deleted tunnel") {
    CHECK(authorize(*stub, attachRequest("nosuch")).result() == cv1::ATTACH_RESULT_BAD_TOKEN);
    CHECK(authorize(*stub, attachRequest("Not_An_Id")).result() == cv1::ATTACH_RESULT_BAD_TOKEN);
    const auto response = authorize(*stub, attachRequest("gone"));
    CHECK(response.result() == cv1::ATTACH_RESULT_BAD_TOKEN);
    CHECK_FALSE(response.has_record());
  }
  SUBCASE("129 routes are counted first, even with a bad token") {
    cv1::AuthorizeAttachRequest many = attachRequest("alpha", numberedRoutes(0, 129));
    many.set_token("wrong");
    auto response = authorize(*stub, many);
    CHECK(response.result() == cv1::ATTACH_RESULT_TOO_MANY_ROUTES);
    CHECK(response.message() == "129 routes in one attach; at most 128");
    many.set_tunnel_id("nosuch");
    CHECK(authorize(*stub, many).result() == cv1::ATTACH_RESULT_TOO_MANY_ROUTES);
    // 128 is allowed.
    CHECK(authorize(*stub, attachRequest("alpha", numberedRoutes(0, 128))).result() ==
          cv1::ATTACH_RESULT_OK);
  }
  SUBCASE("an invalid route, after the token") {
    for (const char* route : {"Api", "-api", "api-", "a.b", "a_b", " "}) {
      CAPTURE(route);
      const auto response = authorize(*stub, attachRequest("alpha", {"", route}));
      CHECK(response.result() == cv1::ATTACH_RESULT_INVALID_ROUTE);
      CHECK(response.message() == std::string("route \"") + route + "\" is not one DNS label");
    }
    auto response = authorize(*stub, attachRequest("alpha", {std::string(64, 'a')}));
    CHECK(response.result() == cv1::ATTACH_RESULT_INVALID_ROUTE);
    CHECK(response.message() == "a route is longer than one DNS label");
    CHECK(authorize(*stub, attachRequest("alpha", {std::string(63, 'a')})).result() ==
          cv1::ATTACH_RESULT_OK);
    cv1::AuthorizeAttachRequest badToken = attachRequest("alpha", {"Api"});
    badToken.set_token("wrong");
    CHECK(authorize(*stub, badToken).result() == cv1::ATTACH_RESULT_BAD_TOKEN);
  }
  SUBCASE("a certificate that is not ready") {
    TunnelRecord issuing = readyTunnel("fresh");  // first issuance still running
    issuing.certificate.state = CertificateState::kIssuing;
    issuing.certificate.chainPem.clear();
    issuing.certificate.notAfterMs = 0;
    h.addTunnel(issuing);
    auto response = authorize(*stub, attachRequest("fresh"));
    CHECK(response.result() == cv1::ATTACH_RESULT_CERT_NOT_READY);
    CHECK_FALSE(response.has_record());

    TunnelRecord expired = readyTunnel("expired");
    expired.certificate.notAfterMs = kNowMs;
    h.addTunnel(expired);
    CHECK(authorize(*stub, attachRequest("expired")).result() == cv1::ATTACH_RESULT_CERT_NOT_READY);

    TunnelRecord none = readyTunnel("bare");
    none.certificate = CertificateInfo{};
    h.addTunnel(none);
    CHECK(authorize(*stub, attachRequest("bare")).result() == cv1::ATTACH_RESULT_CERT_NOT_READY);

    // A renewal running over a valid chain does not stop attaches.
    TunnelRecord renewing = readyTunnel("renewing");
    renewing.certificate.state = CertificateState::kIssuing;
    h.addTunnel(renewing);
    response = authorize(*stub, attachRequest("renewing"));
    CHECK(response.result() == cv1::ATTACH_RESULT_OK);
    CHECK(response.record().cert_ready());
    CHECK(response.record().certificate_state() == cv1::CERTIFICATE_STATE_ISSUING);
  }
  SUBCASE("more than 256 routes for the tunnel on this machine") {
    RelayClient relay(*stub);
    relay.hello("machine-a", 1);
    auto first = numberedRoutes(0, 100);
    auto second = numberedRoutes(100, 100);
    relay.snapshot({makeBridge("b1", "alpha", first), makeBridge("b2", "alpha", second),
                    makeBridge("o1", "other", numberedRoutes(500, 100))},
                   true);
    REQUIRE(eventually([&] { return h.registry().totals().bridges == 3; }));
    // 200 held + 56 new = 256: allowed; routes already held do not count twice.
    auto fits = numberedRoutes(150, 106);
    CHECK(authorize(*stub, attachRequest("alpha", fits)).result() == cv1::ATTACH_RESULT_OK);
    auto over = numberedRoutes(150, 107);
    const auto response = authorize(*stub, attachRequest("alpha", over));
    CHECK(response.result() == cv1::ATTACH_RESULT_TOO_MANY_ROUTES);
    CHECK(response.message() == "the tunnel would hold 257 routes on this machine; at most 256");
    REQUIRE(relay.close().ok());
    REQUIRE(eventually([&] { return h.registry().totals().bridges == 0; }));
    CHECK(authorize(*stub, attachRequest("alpha", over)).result() == cv1::ATTACH_RESULT_OK);
  }
}

TEST_CASE("control: attaches authorized on the session are answered as the unary call answers") {
  Harness h;
  h.addTunnel(readyTunnel("alpha"));
  TunnelRecord gone = readyTunnel("gone");
  gone.deletedAtMs = kNowMs - 1;
  h.addTunnel(gone);
  TunnelRecord issuing = readyTunnel("fresh");
  issuing.certificate.state = CertificateState::kIssuing;
  issuing.certificate.chainPem.clear();
  issuing.certificate.notAfterMs = 0;
  h.addTunnel(issuing);
  auto stub = h.stub();
  RelayClient relay(*stub);
  const cv1::SessionAccepted accepted = relay.hello("machine-a", 1);
  CHECK(accepted.authorize_on_session());
  relay.snapshot({}, true);

  std::vector<cv1::AuthorizeAttachRequest> requests;
  requests.push_back(attachRequest("alpha"));
  requests.push_back(attachRequest("alpha"));
  requests.back().set_token("token-alphx");
  requests.push_back(attachRequest("nosuch"));
  requests.push_back(attachRequest("gone"));
  requests.push_back(attachRequest("alpha", numberedRoutes(0, 129)));
  requests.push_back(attachRequest("alpha", {"", "Api"}));
  requests.push_back(attachRequest("fresh"));
  for (int i = 0; i < 40; ++i)
    requests.push_back(attachRequest("alpha", {"r" + std::to_string(i)}));
  size_t messages = 0;
  const auto answers = authorizeOnSession(relay, requests, &messages);
  MESSAGE("answer messages for ", requests.size(), " requests: ", messages);
  for (size_t i = 0; i < requests.size(); ++i) {
    CAPTURE(i);
    const cv1::AuthorizeAttachResponse unary = authorize(*stub, requests[i]);
    CHECK(google::protobuf::util::MessageDifferencer::Equals(answers[i], unary));
  }
  CHECK(answers[0].result() == cv1::ATTACH_RESULT_OK);
  CHECK(answers[0].has_record());
  CHECK(answers[1].result() == cv1::ATTACH_RESULT_BAD_TOKEN);
  CHECK(answers[4].result() == cv1::ATTACH_RESULT_TOO_MANY_ROUTES);
  CHECK(answers[5].result() == cv1::ATTACH_RESULT_INVALID_ROUTE);
  CHECK(answers[6].result() == cv1::ATTACH_RESULT_CERT_NOT_READY);

  // The registry's view counts: routes held by the relay's bridges are part of the check.
  std::vector<std::string> held = numberedRoutes(0, 200);
  relay.attached(makeBridge("a1", "alpha", held));
  REQUIRE(eventually([&] { return h.registry().bridgeCount("alpha") == 1; }));
  const auto crowded = authorizeOnSession(relay, {attachRequest("alpha", numberedRoutes(200, 57))});
  CHECK(crowded[0].result() == cv1::ATTACH_RESULT_TOO_MANY_ROUTES);
  REQUIRE(relay.close().ok());
}

TEST_CASE("control: FetchTunnel") {
  Harness h;
  const StoredTunnel alpha = h.addTunnel(readyTunnel("alpha"));
  TunnelRecord gone = readyTunnel("gone");
  gone.deletedAtMs = kNowMs - 1;
  h.addTunnel(gone);
  auto stub = h.stub();
  auto fetch = [&](const std::string& id) {
    grpc::ClientContext context;
    context.set_deadline(testing::soon());
    cv1::FetchTunnelRequest request;
    request.set_tunnel_id(id);
    cv1::FetchTunnelResponse response;
    const grpc::Status status = stub->FetchTunnel(&context, request, &response);
    REQUIRE_MESSAGE(status.ok(), status.error_message());
    return response;
  };

  auto response = fetch("alpha");
  CHECK(response.found());
  REQUIRE(response.has_record());
  CHECK(response.record().tunnel_id() == "alpha");
  CHECK(response.record().revision() == static_cast<uint64_t>(alpha.revision));
  CHECK(response.record().token_sha256() == sha256Bytes("token-alpha"));
  for (const char* id : {"nosuch", "gone", "Not_An_Id", ""}) {
    CAPTURE(id);
    response = fetch(id);
    CHECK_FALSE(response.found());
    CHECK_FALSE(response.has_record());
  }
}

TEST_CASE("control: with storage down, attaches answer ERROR and fetches UNAVAILABLE") {
  testing::TempDir dir;
  auto real = testing::openTestStore(dir.path() / "store.db");
  testing::FlakyStore flaky(*real);
  Harness h(HarnessOptions{10000, &flaky});
  h.addTunnel(readyTunnel("alpha"));
  auto stub = h.stub();
  flaky.down = true;

  auto response = authorize(*stub, attachRequest("alpha"));
  CHECK(response.result() == cv1::ATTACH_RESULT_ERROR);
  CHECK(response.message() == "storage unavailable");
  CHECK_FALSE(response.has_record());
  // The route count needs no storage.
  CHECK(authorize(*stub, attachRequest("alpha", numberedRoutes(0, 129))).result() ==
        cv1::ATTACH_RESULT_TOO_MANY_ROUTES);

  grpc::ClientContext context;
  context.set_deadline(testing::soon());
  cv1::FetchTunnelRequest request;
  request.set_tunnel_id("alpha");
  cv1::FetchTunnelResponse fetched;
  const grpc::Status status = stub->FetchTunnel(&context, request, &fetched);
  CHECK(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(status.error_message() == "storage unavailable");

  // A session still works: the snapshot is taken, only the records stay behind.
  RelayClient relay(*stub);
  relay.hello("machine-a", 1);
  relay.snapshot({makeBridge("a1", "alpha")}, true);
  REQUIRE(eventually([&] { return h.registry().bridgeCount("alpha") == 1; }));
  expectSentinel(h.hub(), relay);
  // Carried by the session, the same answer: ERROR, so relayd decides from its cache.
  const auto onSession = authorizeOnSession(relay, {attachRequest("alpha")});
  CHECK(onSession[0].result() == cv1::ATTACH_RESULT_ERROR);
  CHECK(onSession[0].message() == "storage unavailable");

  flaky.down = false;
  CHECK(authorize(*stub, attachRequest("alpha")).result() == cv1::ATTACH_RESULT_OK);
  CHECK(authorizeOnSession(relay, {attachRequest("alpha")})[0].result() == cv1::ATTACH_RESULT_OK);
  REQUIRE(relay.close().ok());
}

// Records what the registry tells its observer (the mesh node in controld).
class RecordingObserver final : public BridgeRegistryObserver {
 public:
  void relayReplaced(const std::string&, const std::vector<BridgeEntry>&) override {}
  void bridgeAttached(const std::string&, const BridgeEntry&) override {}
  void bridgeDetached(const std::string&, const std::string& bridgeId) override {
    const std::lock_guard lock(mutex);
    detached.push_back(bridgeId);
  }
  void relayDropped(const std::string&) override {}
  void bridgeAuthorized(const std::string& relayKey, const BridgeEntry& bridge) override {
    const std::lock_guard lock(mutex);
    authorized.emplace_back(relayKey, bridge);
  }
  std::mutex mutex;
  std::vector<std::pair<std::string, BridgeEntry>> authorized;
  std::vector<std::string> detached;
};

TEST_CASE("control: an attach allowed on the session is announced before relayd hears the answer") {
  Harness h;
  h.addTunnel(readyTunnel("alpha"));
  RecordingObserver observer;
  h.registry().setObserver(&observer);
  auto stub = h.stub();
  RelayClient relay(*stub);
  relay.hello("machine-a", 1);
  relay.snapshot({}, true);

  auto refused = attachRequest("alpha");
  refused.set_token("token-alphx");
  const auto answers = authorizeOnSession(relay, {attachRequest("alpha"), refused});
  REQUIRE(answers[0].result() == cv1::ATTACH_RESULT_OK);
  REQUIRE(answers[1].result() == cv1::ATTACH_RESULT_BAD_TOKEN);
  std::string relayKey;
  {
    // Already told when the answer arrived: the announcement comes first.
    const std::lock_guard lock(observer.mutex);
    REQUIRE(observer.authorized.size() == 1);
    const auto& [key, bridge] = observer.authorized.front();
    relayKey = key;
    CHECK_FALSE(relayKey.empty());
    CHECK(bridge.bridgeId == "b-new");
    CHECK(bridge.tunnelId == "alpha");
    CHECK(bridge.routes == std::vector<std::string>{"", "api"});
    CHECK(bridge.origin == "laptop");
    CHECK(bridge.maxConns == 256);
    CHECK(bridge.peerAddress == "192.0.2.10:40000");
  }
  // The registry holds nothing for it, yet a detached report of it reaches the observer (an
  // authorized attach that failed is announced detached).
  CHECK(h.registry().bridgeCount("alpha") == 0);
  h.registry().detached(relayKey, "b-new");
  {
    const std::lock_guard lock(observer.mutex);
    CHECK(observer.detached == std::vector<std::string>{"b-new"});
  }
  REQUIRE(relay.close().ok());
  h.registry().setObserver(nullptr);
}

}  // namespace
}  // namespace ot::controld
