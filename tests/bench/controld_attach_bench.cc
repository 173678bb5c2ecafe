// controld's CPU per attach authorization against the number of live bridges it knows of.
// Registers N bridges (two per tunnel, over one relay) in a real BridgeRegistry, then times
// ControlService::AuthorizeAttach for a tunnel that already holds a bridge (the case that used to
// walk every bridge), against a real SQLite store in a temporary directory. Prints, per N, the
// process CPU per call for the whole authorization and for the registry's part alone. Built by
// CMake, not run by CI: numbers are for docs/capacity.md, never asserted.
//
//   build/tests/controld/ot_controld_attach_bench [attaches per size, default 20000]
#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/crypto.h"
#include "controld/relays/bridge_registry.h"
#include "controld/relays/control_service.h"
#include "controld/relays/relay_hub.h"
#include "controld/store/store.h"

namespace {

using namespace ot::controld;

constexpr int64_t kNowMs = 1'700'000'000'000;

double cpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

TunnelRecord readyTunnel(const std::string& id) {
  TunnelRecord record;
  record.id = id;
  record.hostname = id + ".bench.test";
  record.tokenSha256Hex = ot::crypto::toHex(ot::crypto::sha256("token-" + id));
  record.createdAtMs = kNowMs - 1000;
  record.certificate.id = "cert-" + id;
  record.certificate.state = CertificateState::kReady;
  record.certificate.chainPem = "-----BEGIN CERTIFICATE-----\n(bench)\n-----END CERTIFICATE-----\n";
  record.certificate.notAfterMs = kNowMs + 60LL * 86'400'000;
  return record;
}

BridgeEntry bridgeOf(size_t index) {
  BridgeEntry bridge;
  bridge.bridgeId = "br_" + std::to_string(index);
  bridge.tunnelId = "t" + std::to_string(index / 2);
  bridge.routes = {"", "api"};
  bridge.origin = "laptop";
  bridge.maxConns = 256;
  bridge.attachedAtMs = kNowMs - 1000;
  return bridge;
}

int run(int attaches) {
  char pattern[] = "/tmp/ot-attach-bench-XXXXXX";
  if (mkdtemp(pattern) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::filesystem::path dir(pattern);
  StoreOptions options;
  options.url = "sqlite:" + (dir / "bench.db").string();
  options.poolSize = 2;
  auto store = openStore(options);
  if (!store.ok() || !(*store)->migrate().ok()) {
    std::fprintf(stderr, "cannot open the SQLite store in %s\n", pattern);
    return 1;
  }
  // The tunnel that attaches: t0, which holds bridge br_0 (and br_1) in every registry below.
  if (!(*store)->insertTunnel(readyTunnel("t0")).ok()) return 1;

  ot::controld::cv1::AuthorizeAttachRequest request;
  request.set_tunnel_id("t0");
  request.set_token("token-t0");
  request.add_routes("");
  request.add_routes("www");
  request.set_bridge_id("br_new");
  request.set_max_conns(256);

  std::printf("%10s %12s %14s %14s\n", "bridges", "attaches", "authorize_us", "registry_us");
  for (const size_t bridges : {size_t{1000}, size_t{10000}, size_t{50000}}) {
    BridgeRegistry registry;
    std::vector<BridgeEntry> entries;
    entries.reserve(bridges);
    for (size_t i = 0; i < bridges; ++i) entries.push_back(bridgeOf(i));
    registry.replaceRelay("machine/1", std::move(entries));
    RelayHub hub(registry, RelayHubOptions{10000, "bench", [] { return kNowMs; }});
    ControlService service(
        **store, registry, hub,
        ControlServiceOptions{std::chrono::milliseconds(4000), std::chrono::milliseconds(2000),
                              [] { return kNowMs; }});
    grpc::ServerContext context;
    ot::controld::cv1::AuthorizeAttachResponse response;
    // Warm the store's connection and caches first.
    for (int i = 0; i < 100; ++i) (void)service.AuthorizeAttach(&context, &request, &response);
    if (response.result() != ot::controld::cv1::ATTACH_RESULT_OK) {
      std::fprintf(stderr, "the bench's attach was refused: %s\n", response.message().c_str());
      return 1;
    }
    const double started = cpuSeconds();
    for (int i = 0; i < attaches; ++i) (void)service.AuthorizeAttach(&context, &request, &response);
    const double authorizeUs = (cpuSeconds() - started) * 1e6 / attaches;

    const std::vector<std::string> requested{"", "www"};
    size_t sink = 0;
    const double registryStarted = cpuSeconds();
    for (int i = 0; i < attaches; ++i) sink += registry.routeCountWith("t0", requested);
    const double registryUs = (cpuSeconds() - registryStarted) * 1e6 / attaches;
    if (sink != static_cast<size_t>(attaches) * 3) {
      std::fprintf(stderr, "unexpected route count\n");
      return 1;
    }
    std::printf("%10zu %12d %14.2f %14.3f\n", bridges, attaches, authorizeUs, registryUs);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int attaches = argc > 1 ? std::atoi(argv[1]) : 20000;
  if (attaches <= 0) {
    std::fprintf(stderr, "usage: %s [attaches per size]\n", argv[0]);
    return 2;
  }
  return run(attaches);
}
