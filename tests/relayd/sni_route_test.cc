#include "relayd/sni_route.h"

#include <doctest/doctest.h>

using ot::relayd::classifySni;
using ot::relayd::parseBridgePath;
using Kind = ot::relayd::SniTarget::Kind;

TEST_CASE("sni route: the domain, a tunnel, a named route, and everything else") {
  const std::string domain = "opentunnel.example";
  CHECK(classifySni("opentunnel.example", domain).kind == Kind::kApi);

  auto tunnel = classifySni("k3x9q2.opentunnel.example", domain);
  CHECK(tunnel.kind == Kind::kTunnel);
  CHECK(tunnel.tunnelId == "k3x9q2");
  CHECK(tunnel.route.empty());

  auto route = classifySni("api.k3x9q2.opentunnel.example", domain);
  CHECK(route.kind == Kind::kTunnel);
  CHECK(route.tunnelId == "k3x9q2");
  CHECK(route.route == "api");

  CHECK(classifySni("a.b.k3x9q2.opentunnel.example", domain).kind == Kind::kOther);  // deeper
  CHECK(classifySni("other.example", domain).kind == Kind::kOther);
  CHECK(classifySni("xopentunnel.example", domain).kind == Kind::kOther);
  CHECK(classifySni(".opentunnel.example", domain).kind == Kind::kOther);
  CHECK(classifySni("-bad.opentunnel.example", domain).kind == Kind::kOther);
  CHECK(classifySni("under_score.opentunnel.example", domain).kind == Kind::kOther);
  CHECK(classifySni("", domain).kind == Kind::kOther);
  CHECK(classifySni("example", domain).kind == Kind::kOther);
}

TEST_CASE("sni route: the bridge upgrade path") {
  auto path = parseBridgePath("/api/tunnel/k3x9q2/bridge");
  CHECK(path.matches);
  CHECK(path.validId);
  CHECK(path.tunnelId == "k3x9q2");

  auto bad = parseBridgePath("/api/tunnel/K_3/bridge");
  CHECK(bad.matches);
  CHECK_FALSE(bad.validId);

  CHECK_FALSE(parseBridgePath("/api/tunnel/k3x9q2/bridge?x=1").matches);
  CHECK_FALSE(parseBridgePath("/api/tunnel/a/b/bridge").matches);
  CHECK_FALSE(parseBridgePath("/api/tunnel/k3x9q2").matches);
  CHECK_FALSE(parseBridgePath("/api/tunnel//bridge").validId);
}
