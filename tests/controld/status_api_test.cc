// GET /api/tunnel/{id}/status (docs/api.md "Status", docs/pools-status.md): the route's auth and
// shape, the health rules, relayd's replies merged, and the source's round trip through the relay
// hub: a TunnelStatusQuery out on the session, the reply back, a deadline when none comes.
#include <doctest/doctest.h>

#include <thread>

#include "controld/api/status_source.h"
#include "tests/controld/api_test_support.h"

namespace ot::controld {
namespace {

using testing::bearer;
using testing::checkError;
using testing::parseBody;
using testing::TestApi;
using testing::testDatabases;

cv1::TunnelStatusReply sampleReply(uint32_t mainLinks) {
  cv1::TunnelStatusReply reply;
  reply.set_tunnel_id("t");
  cv1::OriginStatus* origin = reply.add_origins();
  origin->set_name("laptop");
  origin->set_reported(true);
  origin->set_report_age_ms(1200);
  cv1::OriginStatusProfile* main = origin->add_profiles();
  main->set_name("main");
  main->set_links(mainLinks);
  main->set_open_streams(3);
  main->set_links_wanted(4);
  main->set_links_up(4);
  cv1::OriginStatusProfile* backup = origin->add_profiles();
  backup->set_name("backup");
  backup->set_index(1);
  backup->set_links_wanted(4);
  backup->set_next_try_ms(5000);
  backup->set_last_error("connection refused");
  return reply;
}

}  // namespace

TEST_CASE("status api: the tunnel's token, 401 and 404 as the other routes") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    TestApi api(*store);
    const auto tunnel = api.create();
    const auto other = api.create();
    const std::string path = "/api/tunnel/" + tunnel.id + "/status";
    checkError(api.call("GET", path), 401, "UnauthorizedError");
    checkError(api.call("GET", path, "", bearer(other.token)), 401, "UnauthorizedError");
    checkError(api.call("GET", "/api/tunnel/nosuchtunnel/status", "", bearer(tunnel.token)), 404,
               "NotFoundError");
    // No relay wired in: unreachable, with the full shape.
    const ApiResponse ok = api.call("GET", path, "", bearer(tunnel.token));
    REQUIRE(ok.status == 200);
    const auto body = parseBody(ok);
    CHECK(body == nlohmann::ordered_json{{"id", tunnel.id},
                                         {"health", "relay_unreachable"},
                                         {"summary", "relay unreachable"},
                                         {"links", 0},
                                         {"peerLinks", 0},
                                         {"origins", nlohmann::ordered_json::array()}});
  }
}

TEST_CASE("status api: health and summary") {
  TunnelStatusInputs inputs;
  inputs.relayConnected = true;
  CHECK(tunnelStatusJson("t", inputs)["health"] == "no_links");
  CHECK(tunnelStatusJson("t", inputs)["summary"] == "no links attached");
  inputs = statusFromReplies({sampleReply(4)});
  const auto body = tunnelStatusJson("t", inputs);
  CHECK(body["health"] == "healthy");
  CHECK(body["summary"] == "healthy (4 links up)");
  CHECK(body["links"] == 4);
  REQUIRE(body["origins"].size() == 1);
  const auto& origin = body["origins"][0];
  CHECK(origin["name"] == "laptop");
  CHECK(origin["links"] == 4);
  CHECK(origin["reported"] == true);
  CHECK(origin["reportAgeMs"] == 1200);
  REQUIRE(origin["profiles"].size() == 2);
  CHECK(origin["profiles"][0] == nlohmann::ordered_json{{"name", "main"},
                                                        {"index", 0},
                                                        {"links", 4},
                                                        {"openStreams", 3},
                                                        {"linksWanted", 4},
                                                        {"linksUp", 4},
                                                        {"nextTryMs", 0},
                                                        {"lastError", ""}});
  CHECK(origin["profiles"][1]["lastError"] == "connection refused");
  CHECK(origin["profiles"][1]["nextTryMs"] == 5000);
  // Links elsewhere in the mesh count; a machine without its relay still says so when none.
  TunnelStatusInputs peers;
  peers.peerLinks = 1;
  CHECK(tunnelStatusJson("t", peers)["summary"] == "healthy (1 link up)");
  CHECK(tunnelStatusJson("t", TunnelStatusInputs{})["health"] == "relay_unreachable");
}

TEST_CASE("status api: replies of several relays merge per origin and profile") {
  cv1::TunnelStatusReply second = sampleReply(2);
  second.mutable_origins(0)->set_report_age_ms(100);
  second.mutable_origins(0)->mutable_profiles(1)->set_last_error("newer");
  const auto inputs = statusFromReplies({sampleReply(4), second});
  REQUIRE(inputs.origins.size() == 1);
  CHECK(inputs.origins[0].reportAgeMs == 100);
  REQUIRE(inputs.origins[0].profiles.size() == 2);
  CHECK(inputs.origins[0].profiles[0].links == 6);
  CHECK(inputs.origins[0].profiles[0].openStreams == 6);
  CHECK(inputs.origins[0].profiles[1].lastError == "newer");
}

TEST_CASE("status api: links on other machines count per origin, with their machines") {
  TunnelStatusInputs inputs = statusFromReplies({sampleReply(4)});
  REQUIRE(inputs.origins.size() == 1);
  const std::string here = inputs.origins[0].name;
  auto peer = [](const std::string& machine, const std::string& origin) {
    ot::mesh::BridgeEntry entry;
    entry.machine = machine;
    entry.tunnelId = "t";
    entry.bridgeId = machine + origin;
    entry.routes = {""};
    entry.origin = origin;
    return entry;
  };
  addPeerBridges(inputs, {peer("m-c", here), peer("m-b", here), peer("m-b", "zz-elsewhere"),
                          peer("m-b", here + "x")});
  CHECK(inputs.peerLinks == 4);
  REQUIRE(inputs.origins.size() == 3);
  CHECK(inputs.origins[0].name == here);
  CHECK(inputs.origins[0].peerLinks == 2);
  CHECK(inputs.origins[0].peerMachines == std::vector<std::string>{"m-b", "m-c"});
  // Known only from the mesh: an entry without profiles, in name order.
  CHECK(inputs.origins[1].name == here + "x");
  CHECK(inputs.origins[1].profiles.empty());
  CHECK(inputs.origins[2].name == "zz-elsewhere");
  const auto json = tunnelStatusJson("t", inputs);
  CHECK(json["peerLinks"] == 4);
  CHECK(json["links"] == 4 + 4);  // sampleReply(4): 4 links here, 4 elsewhere
  CHECK(json["origins"][0]["peerMachines"] == nlohmann::ordered_json{"m-b", "m-c"});
  CHECK(json["origins"][2]["links"] == 0);
  CHECK(json["origins"][2]["peerLinks"] == 1);
}

TEST_CASE("status api: the source asks relayd and waits for its reply, or its deadline") {
  BridgeRegistry registry;
  RelayHub hub(registry);
  TunnelStatusSource source(hub, registry, nullptr, std::chrono::milliseconds(300));
  // No relay: nothing asked.
  CHECK_FALSE(source.gather("t").relayConnected);

  cv1::Hello hello;
  hello.set_machine_id("m-self");
  hello.set_epoch(1);
  auto session = hub.open(hello, [] {});
  REQUIRE(session != nullptr);
  (void)session->outbox().popAll();  // SessionAccepted
  std::thread relay([&] {
    auto message = session->outbox().pop();
    REQUIRE(message.has_value());
    REQUIRE(message->has_command());
    REQUIRE(message->command().has_tunnel_status());
    CHECK(message->command().tunnel_status().tunnel_id() == "t");
    cv1::TunnelStatusReply reply = sampleReply(4);
    reply.set_command_id(message->command().id());
    hub.tunnelStatus(session, reply);
  });
  const TunnelStatusInputs answered = source.gather("t");
  relay.join();
  CHECK(answered.relayConnected);
  CHECK(answered.relayAnswered);
  REQUIRE(answered.origins.size() == 1);
  CHECK(answered.origins[0].profiles[1].lastError == "connection refused");

  // A relayd that does not answer (an older one): the registry's counts after the deadline.
  BridgeEntry bridge;
  bridge.bridgeId = "b1";
  bridge.tunnelId = "t";
  bridge.origin = "laptop";
  bridge.profile = "main";
  hub.snapshotComplete(session, {bridge});
  const TunnelStatusInputs silent = source.gather("t");
  CHECK(silent.relayConnected);
  CHECK_FALSE(silent.relayAnswered);
  REQUIRE(silent.origins.size() == 1);
  CHECK(silent.origins[0].name == "laptop");
  CHECK(silent.origins[0].profiles[0].links == 1);
  CHECK(tunnelStatusJson("t", silent)["health"] == "healthy");
}

}  // namespace ot::controld
