#include "controld/controld_config.h"

namespace ot::controld {

void addControldFlags(CLI::App& app, ControldConfig& c) {
  app.add_option("--domain", c.domain, "API domain; tunnels are <id>.<domain>")
      ->envname("OPENTUNNEL_DOMAIN")
      ->capture_default_str();
  app.add_option("--database-url", c.database_url,
                 "mysql://user:password@host:port/db or sqlite:/path; empty uses --sqlite-path")
      ->envname("DATABASE_URL");
  app.add_option("--sqlite-path", c.sqlite_path, "embedded SQLite database file")
      ->envname("SQLITE_PATH")
      ->capture_default_str();
  app.add_option("--startup-db-timeout-ms", c.startup_db_timeout_ms,
                 "exit with status 1 if the database is unreachable this long at startup; 0 waits")
      ->envname("STARTUP_DB_TIMEOUT_MS")
      ->capture_default_str();
  app.add_option("--http-mode", c.http_mode,
                 "socket: API on the unix socket only; serve: also plain HTTP on --http-listen")
      ->envname("HTTP_MODE")
      ->check(CLI::IsMember({"socket", "serve"}))
      ->capture_default_str();
  app.add_option("--api-socket", c.api_socket, "unix socket the HTTP API listens on (for relayd)")
      ->envname("API_SOCKET")
      ->capture_default_str();
  config::addListenOption(app, "--http-listen", "HTTP_LISTEN", c.http_listen,
                          "plain HTTP API listener with --http-mode serve (development)");
  app.add_option("--control-socket", c.control_socket, "unix socket of the gRPC services")
      ->envname("CONTROL_SOCKET")
      ->capture_default_str();
  config::addListenOption(app, "--metrics-listen", "METRICS_LISTEN", c.metrics_listen,
                          "Prometheus /metrics; off disables");
  app.add_option("--issuer", c.issuer, "certificate issuer: local (built-in CA) or acme")
      ->envname("ISSUER")
      ->check(CLI::IsMember({"local", "acme"}))
      ->capture_default_str();
  app.add_option("--local-ca-file", c.local_ca_file,
                 "with --issuer local, write the CA certificate here for clients to trust")
      ->envname("LOCAL_CA_FILE");
  app.add_option("--tls-cert-file", c.tls_cert_file, "serve this certificate for the API domain")
      ->envname("TLS_CERT_FILE");
  app.add_option("--tls-key-file", c.tls_key_file, "the key of --tls-cert-file")
      ->envname("TLS_KEY_FILE");
  app.add_option("--machine-id", c.machine_id, "this machine's ID, also the job lease owner")
      ->envname("MACHINE_ID");
  app.add_option("--log-format", c.log_format, "text or json")
      ->envname("LOG_FORMAT")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  app.add_option("--log-level", c.log_level, "trace, debug, info, warn, error")
      ->envname("LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
}

}  // namespace ot::controld
