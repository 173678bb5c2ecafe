// controld's settings: every flag also reads an environment variable (controld --help lists them).
#pragma once

#include <cstdint>
#include <string>

#include "common/analytics/analytics_settings.h"
#include "common/cli_fwd.h"
#include "common/config.h"
#include "common/machine_identity.h"
#include "controld/mesh/mesh_settings.h"

namespace ot::controld {

struct ControldConfig {
  std::string domain = "opentunnel.localhost";
  std::string databaseUrl;  // empty: embedded SQLite at sqlite_path
  std::string sqlitePath = "opentunnel.db";
  uint64_t startupDbTimeoutMs = 120'000;
  std::string httpMode = "socket";  // socket: unix socket for relayd; serve: also plain TCP
  std::string apiSocket = "/run/opentunnel/api.sock";
  config::ListenAddress httpListen{config::ListenAddress::Kind::kTcp, "127.0.0.1", 8080, {}};
  std::string controlSocket = "/run/opentunnel/control.sock";
  config::ListenAddress metricsListen{};  // off
  std::string issuer = "local";           // local or acme
  // ISSUER=acme (acme_issuer.h). Secrets: eab_hmac_key, account_key_jwk, cloudflare_api_token.
  std::string acmeUrl = "https://acme.zerossl.com/v2/DV90";
  std::string acmeEmail = "acme@opentunnel.xyz";
  std::string acmeEabKid;
  std::string acmeEabHmacKey;
  std::string acmeAccountKeyJwk;
  std::string acmeCaBundle;
  int64_t acmeDnsPropagationTimeoutMs = 10'000;
  std::string acmeDnsResolver;  // host:port asked for the TXT records; "" the system's
  int64_t acmePollIntervalMs = 2'000;
  // DNS-01 providers (dns_factory.h): challtestsrv or cloudflare.
  std::string dnsProvider;
  std::string challtestsrvUrl = "http://127.0.0.1:8055";
  std::string cloudflareZoneId;
  std::string cloudflareApiToken;
  std::string cloudflareApiUrl = "https://api.cloudflare.com/client/v4";
  std::string localCaFile;
  std::string tlsCertFile;
  std::string tlsKeyFile;
  // MACHINE_ID (resolved by main: never empty afterwards; the job lease owner), REGION, STATE_DIR.
  MachineIdentitySettings identity;
  int64_t createRatePerHour = 30;
  int64_t createRateBurst = 10;
  // Proxies whose CF-Connecting-IP names the client (ip_ranges.h): CIDRs, "cloudflare" for
  // Cloudflare's published ranges, or off.
  std::string trustedProxyRanges = "cloudflare";
  // Failed authentications (401s) one source (IPv4 address, IPv6 /64) may have per window before
  // its credentials are refused with 429 for the rest of the window; 0 disables refusing.
  uint32_t authFailureLimit = 20;
  uint64_t authFailureWindowMs = 60'000;
  int64_t issuanceRatePerDay = 5;
  int64_t issuanceRateBurst = 5;
  int64_t issuanceBacklogLimit = 200;
  int issuanceConcurrency = 4;
  int64_t issuanceRetryDelayMs = 30'000;
  // How long a machine holds a job it claimed; extended every third of it while it runs. A
  // machine that dies holding one delays that job by at most this long.
  int64_t issuanceLeaseMs = 120'000;
  int64_t localCertValidityMs = 90LL * 24 * 60 * 60 * 1000;
  // Secret: enables POST /api/admin/stats (docs/api.md "Admin"); empty: those routes do not exist.
  std::string adminToken;
  // The Admin gRPC service (docs/admin.md): its unix socket (mode 0660; empty: beside
  // CONTROL_SOCKET, admin_server.h), and optionally TCP, which needs TLS and ADMIN_TOKEN.
  std::string adminSocket;
  config::ListenAddress adminListen{};  // off
  std::string adminTlsCert;
  std::string adminTlsKey;
  int databasePoolSize = 50;  // MySQL; SQLite keeps at most 16 (store/sql_store.h)
  // The website on the API domain's root (docs/website.md); empty: none (every such path 404s).
  std::string websiteDir;
  // How often relayd's usage reports are added to usage_hourly (GET /api/tunnel/{id}/usage).
  int64_t usageFlushIntervalMs = 10'000;
  // The region mesh (INTERNAL_LISTEN and the MESH_* settings, docs/mesh.md); checked into
  // mesh::MeshSettings by mesh::checkMeshFlags at start-up. INTERNAL_LISTEN off: no mesh.
  mesh::MeshFlags mesh;
  // ANALYTICS_*: tunnel, certificate and bridge events posted in batches (docs/analytics.md).
  analytics::AnalyticsSettings analytics{};
  std::string logFormat = "text";
  std::string logLevel = "info";
};

void addControldFlags(CLI::App& app, ControldConfig& config);

}  // namespace ot::controld
