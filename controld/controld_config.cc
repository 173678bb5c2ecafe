#include "controld/controld_config.h"

#include <CLI/CLI.hpp>

#include "common/internal_settings.h"

namespace ot::controld {

namespace {

// Secrets never get capture_default_str, so --help cannot show them.
void addAcmeFlags(CLI::App& app, ControldConfig& c) {
  app.add_option("--acme-url", c.acmeUrl, "ACME directory URL")
      ->envname("ACME_URL")
      ->capture_default_str();
  app.add_option("--acme-email", c.acmeEmail, "ACME account contact")
      ->envname("ACME_EMAIL")
      ->capture_default_str();
  app.add_option("--acme-eab-kid", c.acmeEabKid, "external account binding key ID")
      ->envname("ACME_EAB_KID");
  app.add_option("--acme-eab-hmac-key", c.acmeEabHmacKey,
                 "secret: external account binding MAC key (base64url)")
      ->envname("ACME_EAB_HMAC_KEY");
  app.add_option("--acme-account-key-jwk", c.acmeAccountKeyJwk,
                 "secret: the account's P-256 private JWK (controld account-key makes one)")
      ->envname("ACME_ACCOUNT_KEY_JWK");
  app.add_option("--acme-ca-bundle", c.acmeCaBundle, "extra roots for the ACME server (PEM)")
      ->envname("ACME_CA_BUNDLE");
  app.add_option("--acme-dns-propagation-timeout-ms", c.acmeDnsPropagationTimeoutMs,
                 "wait this long for the resolver to see the TXT records; 0 skips the check")
      ->envname("ACME_DNS_PROPAGATION_TIMEOUT_MS")
      ->check(CLI::Range(int64_t{0}, int64_t{600'000}))
      ->capture_default_str();
  app.add_option(
         "--acme-dns-resolver", c.acmeDnsResolver,
         "IPv4 host:port asked for the TXT records (challtestsrv's DNS); empty: the system's")
      ->envname("ACME_DNS_RESOLVER");
  app.add_option("--acme-poll-interval-ms", c.acmePollIntervalMs,
                 "between polls of authorizations and orders (60 at most each)")
      ->envname("ACME_POLL_INTERVAL_MS")
      ->check(CLI::Range(int64_t{1}, int64_t{600'000}))
      ->capture_default_str();
  app.add_option("--dns-provider", c.dnsProvider, "DNS-01 records: cloudflare or challtestsrv")
      ->envname("DNS_PROVIDER")
      ->check(CLI::IsMember({"", "cloudflare", "challtestsrv"}));
  app.add_option("--challtestsrv-url", c.challtestsrvUrl, "pebble-challtestsrv management API")
      ->envname("CHALLTESTSRV_URL")
      ->capture_default_str();
  app.add_option("--cloudflare-zone-id", c.cloudflareZoneId, "the domain's Cloudflare zone")
      ->envname("CLOUDFLARE_ZONE_ID");
  app.add_option("--cloudflare-api-token", c.cloudflareApiToken,
                 "secret: Cloudflare token with DNS edit on the zone")
      ->envname("CLOUDFLARE_API_TOKEN");
  app.add_option(
         "--admin-token", c.adminToken,
         "secret: bearer token of POST /api/admin/stats and ADMIN_LISTEN; empty disables both")
      ->envname("ADMIN_TOKEN");
  app.add_option("--admin-socket", c.adminSocket,
                 "unix socket of the Admin gRPC service (otctl); default: admin.sock beside "
                 "--control-socket")
      ->envname("ADMIN_SOCKET");
  config::addListenOption(app, "--admin-listen", "ADMIN_LISTEN", c.adminListen,
                          "Admin gRPC service on TCP host:port (needs TLS and ADMIN_TOKEN); off");
  app.add_option("--admin-tls-cert", c.adminTlsCert, "certificate chain (PEM) of ADMIN_LISTEN")
      ->envname("ADMIN_TLS_CERT");
  app.add_option("--admin-tls-key", c.adminTlsKey, "private key (PEM) of ADMIN_LISTEN")
      ->envname("ADMIN_TLS_KEY");
  app.add_option("--cloudflare-api-url", c.cloudflareApiUrl, "Cloudflare API base URL")
      ->envname("CLOUDFLARE_API_URL")
      ->capture_default_str();
}

void addMeshFlags(CLI::App& app, mesh::MeshFlags& m) {
  mesh::addInternalOptions(app, m.internalListen, m.internalToken, m.internalAddress);
  app.add_option("--mesh-peers", m.peers,
                 "other machines' internal addresses, host:port, comma-separated")
      ->envname("MESH_PEERS");
  app.add_option("--mesh-dns", m.dns,
                 "a name whose A/AAAA records are the other machines (at INTERNAL_ADDRESS's "
                 "port); off or empty disables it")
      ->envname("MESH_DNS");
  app.add_option("--mesh-discovery-ms", m.discoveryMs, "how often MESH_DNS is resolved again")
      ->envname("MESH_DISCOVERY_MS")
      ->capture_default_str();
  app.add_option("--mesh-ping-ms", m.pingMs, "an idle mesh link pings this often")
      ->envname("MESH_PING_MS")
      ->capture_default_str();
  app.add_option("--mesh-dead-ms", m.deadMs, "a peer silent this long is down")
      ->envname("MESH_DEAD_MS")
      ->capture_default_str();
  app.add_option("--mesh-hold-ms", m.holdMs,
                 "a peer whose link ended keeps its bridges at most this long while its relayd "
                 "answers that it serves (more than MESH_DEAD_MS)")
      ->envname("MESH_HOLD_MS")
      ->capture_default_str();
  config::addBoolOption(app, "--mesh-verify-address", "MESH_VERIFY_ADDRESS", m.verifyAddress,
                        "a peer's hello address must be where its link comes from (or was dialed)");
  app.add_option("--mesh-handoff-socket", m.handoffSocket,
                 "unix socket (SOCK_SEQPACKET, 0600) relayd hands mesh connections over on; "
                 "default: mesh-handoff.sock beside CONTROL_SOCKET")
      ->envname("MESH_HANDOFF_SOCKET");
}

}  // namespace

void addControldFlags(CLI::App& app, ControldConfig& c) {
  app.add_option("--domain", c.domain, "API domain; tunnels are <id>.<domain>")
      ->envname("OPENTUNNEL_DOMAIN")
      ->capture_default_str();
  app.add_option("--database-url", c.databaseUrl,
                 "mysql://user:password@host:port/db or sqlite:/path; empty uses --sqlite-path")
      ->envname("DATABASE_URL");
  app.add_option("--sqlite-path", c.sqlitePath, "embedded SQLite database file")
      ->envname("SQLITE_PATH")
      ->capture_default_str();
  app.add_option("--startup-db-timeout-ms", c.startupDbTimeoutMs,
                 "exit with status 1 if the database is unreachable this long at startup; 0 waits")
      ->envname("STARTUP_DB_TIMEOUT_MS")
      ->capture_default_str();
  app.add_option("--http-mode", c.httpMode,
                 "socket: API on the unix socket only; serve: also plain HTTP on --http-listen")
      ->envname("HTTP_MODE")
      ->check(CLI::IsMember({"socket", "serve"}))
      ->capture_default_str();
  app.add_option("--api-socket", c.apiSocket, "unix socket the HTTP API listens on (for relayd)")
      ->envname("API_SOCKET")
      ->capture_default_str();
  config::addListenOption(app, "--http-listen", "HTTP_LISTEN", c.httpListen,
                          "plain HTTP API listener with --http-mode serve (development)");
  app.add_option("--control-socket", c.controlSocket, "unix socket of the gRPC services")
      ->envname("CONTROL_SOCKET")
      ->capture_default_str();
  config::addListenOption(app, "--metrics-listen", "METRICS_LISTEN", c.metricsListen,
                          "Prometheus /metrics; off disables");
  app.add_option("--issuer", c.issuer, "certificate issuer: acme, or local (insecure built-in CA)")
      ->envname("ISSUER")
      ->check(CLI::IsMember({"local", "acme"}))
      ->capture_default_str();
  addAcmeFlags(app, c);
  app.add_option("--local-ca-file", c.localCaFile,
                 "with --issuer local, write the CA certificate here for clients to trust")
      ->envname("LOCAL_CA_FILE");
  app.add_option("--tls-cert-file", c.tlsCertFile, "serve this certificate for the API domain")
      ->envname("TLS_CERT_FILE");
  app.add_option("--tls-key-file", c.tlsKeyFile, "the key of --tls-cert-file")
      ->envname("TLS_KEY_FILE");
  addMachineIdentityOptions(app, c.identity,
                            "where controld keeps its machine-id, the job lease owner (give "
                            "relayd the same one to share its ID)");
  app.add_option("--create-rate-per-hour", c.createRatePerHour,
                 "tunnels one client address may create per hour on average; 0 disables")
      ->envname("CREATE_RATE_PER_HOUR")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--create-rate-burst", c.createRateBurst, "tunnels one address may create at once")
      ->envname("CREATE_RATE_BURST")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--trusted-proxy-ranges", c.trustedProxyRanges,
                 "comma-separated CIDRs whose CF-Connecting-IP header names the client "
                 "(cloudflare: Cloudflare's published ranges; off trusts none)")
      ->envname("TRUSTED_PROXY_RANGES")
      ->capture_default_str();
  config::addAuthFailureOptions(app, c.authFailureLimit, c.authFailureWindowMs,
                                "failed authentications", "its credentials get 429");
  app.add_option("--issuance-rate-per-day", c.issuanceRatePerDay,
                 "new certificates one tunnel may request per day on average; 0 disables")
      ->envname("ISSUANCE_RATE_PER_DAY")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--issuance-rate-burst", c.issuanceRateBurst,
                 "new certificates one tunnel may request at once")
      ->envname("ISSUANCE_RATE_BURST")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option(
         "--issuance-backlog-limit", c.issuanceBacklogLimit,
         "while more certificate jobs are pending, creates and new CSRs answer 503; 0 disables")
      ->envname("ISSUANCE_BACKLOG_LIMIT")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--issuance-concurrency", c.issuanceConcurrency,
                 "certificate jobs run at once on this machine (one kept for renewals)")
      ->envname("ISSUANCE_CONCURRENCY")
      ->check(CLI::Range(2, 64))
      ->capture_default_str();
  app.add_option("--issuance-retry-delay-ms", c.issuanceRetryDelayMs,
                 "first retry delay of a failed certificate attempt (doubles, at most an hour)")
      ->envname("ISSUANCE_RETRY_DELAY_MS")
      ->check(CLI::Range(int64_t{1}, int64_t{3'600'000}))
      ->capture_default_str();
  app.add_option("--issuance-lease-ms", c.issuanceLeaseMs,
                 "how long a claimed certificate job is held (extended every third of it)")
      ->envname("ISSUANCE_LEASE_MS")
      ->check(CLI::Range(int64_t{3'000}, int64_t{3'600'000}))
      ->capture_default_str();
  app.add_option("--local-cert-validity-ms", c.localCertValidityMs,
                 "with --issuer local, how long issued certificates are valid")
      ->envname("LOCAL_CERT_VALIDITY_MS")
      ->check(CLI::Range(int64_t{60'000}, int64_t{397} * 24 * 3600 * 1000))
      ->capture_default_str();
  app.add_option("--database-pool-size", c.databasePoolSize,
                 "database connections at most (SQLite: at most 16 whatever this says)")
      ->envname("DATABASE_POOL_SIZE")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--website-dir", c.websiteDir,
                 "directory served on the API domain's root, read into memory at startup; "
                 "empty: no website")
      ->envname("WEBSITE_DIR");
  app.add_option("--usage-flush-interval-ms", c.usageFlushIntervalMs,
                 "how often reported usage is written to the database")
      ->envname("USAGE_FLUSH_INTERVAL_MS")
      ->check(CLI::Range(int64_t{100}, int64_t{3'600'000}))
      ->capture_default_str();
  addMeshFlags(app, c.mesh);
  analytics::addAnalyticsOptions(app, c.analytics);
  app.add_option("--log-format", c.logFormat, "text or json")
      ->envname("LOG_FORMAT")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--log-level", c.logLevel, "trace, debug, info, warn, error")
      ->envname("LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
}

}  // namespace ot::controld
