// controld's settings: every flag also reads an environment variable (controld --help lists them).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "common/config.h"

namespace ot::controld {

struct ControldConfig {
  std::string domain = "opentunnel.localhost";
  std::string database_url;  // empty: embedded SQLite at sqlite_path
  std::string sqlite_path = "opentunnel.db";
  uint64_t startup_db_timeout_ms = 120'000;
  std::string http_mode = "socket";  // socket: unix socket for relayd; serve: also plain TCP
  std::string api_socket = "/run/opentunnel/api.sock";
  config::ListenAddress http_listen{config::ListenAddress::Kind::kTcp, "127.0.0.1", 8080, {}};
  std::string control_socket = "/run/opentunnel/control.sock";
  config::ListenAddress metrics_listen{};  // off
  std::string issuer = "local";  // local or acme
  // ISSUER=acme (acme_issuer.h). Secrets: eab_hmac_key, account_key_jwk, cloudflare_api_token.
  std::string acme_url = "https://acme.zerossl.com/v2/DV90";
  std::string acme_email = "acme@opentunnel.xyz";
  std::string acme_eab_kid;
  std::string acme_eab_hmac_key;
  std::string acme_account_key_jwk;
  std::string acme_ca_bundle;
  int64_t acme_dns_propagation_timeout_ms = 10'000;
  std::string acme_dns_resolver;  // host:port asked for the TXT records; "" the system's
  int64_t acme_poll_interval_ms = 2'000;
  // DNS-01 providers (dns_factory.h): challtestsrv or cloudflare.
  std::string dns_provider;
  std::string challtestsrv_url = "http://127.0.0.1:8055";
  std::string cloudflare_zone_id;
  std::string cloudflare_api_token;
  std::string cloudflare_api_url = "https://api.cloudflare.com/client/v4";
  std::string local_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string machine_id;  // random when empty
  int64_t create_rate_per_hour = 30;
  int64_t create_rate_burst = 10;
  // Proxies whose CF-Connecting-IP names the client (ip_ranges.h): CIDRs, "cloudflare" for
  // Cloudflare's published ranges, or off.
  std::string trusted_proxy_ranges = "cloudflare";
  // Failed authentications (401s) one source (IPv4 address, IPv6 /64) may have per window before
  // its credentials are refused with 429 for the rest of the window; 0 disables refusing.
  uint32_t auth_failure_limit = 20;
  uint64_t auth_failure_window_ms = 60'000;
  int64_t issuance_rate_per_day = 5;
  int64_t issuance_rate_burst = 5;
  int64_t issuance_backlog_limit = 200;
  int issuance_concurrency = 4;
  int64_t issuance_retry_delay_ms = 30'000;
  int64_t local_cert_validity_ms = 90LL * 24 * 60 * 60 * 1000;
  int database_pool_size = 16;
  std::string log_format = "text";
  std::string log_level = "info";
};

void addControldFlags(CLI::App& app, ControldConfig& config);

}  // namespace ot::controld
