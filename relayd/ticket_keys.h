// The keys relayd's API-domain TLS seals its stateless session tickets with, kept in
// <STATE_DIR>/tls-ticket-keys (mode 0600) so that a restarted relayd (a reconnect storm is one)
// still opens the tickets it gave out before and its bridges resume instead of doing a full
// handshake. docs/relayd.md, "Session resumption", says why the periods are what they are.
//
// One key encrypts (the newest); it is replaced every kTicketKeyRotationSeconds, and a replaced
// key keeps decrypting until the last ticket it sealed has expired (kTicketLifetimeSeconds after
// it stopped sealing), then it is dropped. A missing file is created on the first start; a damaged
// or unreadable one is logged and replaced by fresh keys (tickets sealed before then no longer
// resume: those clients do one full handshake); a file that cannot be written leaves the keys in
// memory only, logged. None of it stops relayd from serving.
#pragma once

#include <openssl/ssl.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace ot::relayd {

inline constexpr std::string_view kTicketKeysFile = "tls-ticket-keys";
// A day: a stolen key opens at most one day of tickets, and the file is written once a day.
inline constexpr int64_t kTicketKeyRotationSeconds = 24 * 3600;
// TLS 1.3's maximum (RFC 8446 4.6.1): a bridge keeps the ticket of its last handshake for as long
// as it stays attached, often days between two relayd restarts, and a storm only resumes the
// bridges whose ticket is still valid.
inline constexpr int64_t kTicketLifetimeSeconds = 7 * 24 * 3600;
// More than the 8 a day's rotation and a 7-day lifetime keep: bounds what a file may hold.
inline constexpr size_t kMaxTicketKeys = 16;

struct TicketKey {
  std::array<uint8_t, 16> name{};  // sent in the clear in each ticket: which key sealed it
  std::array<uint8_t, 32> aesKey{};
  std::array<uint8_t, 32> hmacKey{};
  int64_t createdAt = 0;  // unix seconds
};

// A new random key made at `now`; kInternal when the random source fails.
[[nodiscard]] Result<TicketKey> makeTicketKey(int64_t now);
// The file's text: a header line, then one key per line, newest first.
[[nodiscard]] std::string formatTicketKeys(std::span<const TicketKey> keys);
// kInvalid (saying what is wrong) unless `text` is such a file with 1..kMaxTicketKeys keys.
[[nodiscard]] Result<std::vector<TicketKey>> parseTicketKeys(std::string_view text);

class TicketKeyStore {
 public:
  // The keys of <stateDir>/tls-ticket-keys at `now`: loaded, else made (and saved). Never fails;
  // what went wrong is logged.
  [[nodiscard]] static std::shared_ptr<TicketKeyStore> open(const std::string& stateDir,
                                                            int64_t now);

  // The key that seals new tickets at `now`: rotated (and saved) first when due. Empty only
  // when no random key could be made (no tickets are issued then).
  [[nodiscard]] std::optional<TicketKey> sealing(int64_t now);
  struct Found {
    TicketKey key;
    bool newest = false;  // the sealing key: the ticket need not be reissued
  };
  // The key named `name`, empty when unknown (or dropped): that ticket gets a full handshake.
  [[nodiscard]] std::optional<Found> find(std::span<const uint8_t> name) const;
  // Newest first (a copy: handshakes on relayd's worker threads read the keys too).
  [[nodiscard]] std::vector<TicketKey> keys() const;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  TicketKeyStore(std::string path, std::vector<TicketKey> keys);
  // Drops keys whose last ticket has expired at `now`.
  void dropExpired(int64_t now);
  void save() const;

  std::string path_;
  // Handshakes run on relayd's loop and its handshake workers (relayd/handshake_workers.h), and
  // a rotation replaces the keys: every access holds the lock (a rotation is once a day).
  mutable std::mutex mutex_;
  std::vector<TicketKey> keys_;
};

// Makes `ctx` (a server context) seal and open its TLS session tickets with `store` (kept alive by
// the context), send one ticket per full handshake, and accept tickets up to
// kTicketLifetimeSeconds old. The server-side session cache stays off.
void useTicketKeys(SSL_CTX* ctx, std::shared_ptr<TicketKeyStore> store);

}  // namespace ot::relayd
