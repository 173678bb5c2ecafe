#include "relayd/ticket_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <utility>

#include "common/crypto.h"
#include "common/log.h"

namespace ot::relayd {
namespace {

const log::Logger kTicketKeysLog("relayd.tickets");
constexpr std::string_view kHeader = "opentunnel-tls-ticket-keys v1";

template <size_t N>
bool fromHexInto(std::string_view text, std::array<uint8_t, N>& out) {
  auto bytes = crypto::fromHex(text);
  if (!bytes || bytes->size() != N) return false;
  std::copy(bytes->begin(), bytes->end(), out.begin());
  return true;
}

std::vector<std::string_view> splitWords(std::string_view line) {
  std::vector<std::string_view> words;
  size_t at = 0;
  while (at < line.size()) {
    const size_t end = std::min(line.find(' ', at), line.size());
    if (end > at) words.push_back(line.substr(at, end - at));
    at = end + 1;
  }
  return words;
}

Error invalidFile(std::string what) {
  return Error{ErrorKind::kInvalid, std::move(what)};
}

// The whole file, or the reason it could not be read ("" text and false when it does not exist).
Result<std::string> readFile(const std::string& path, bool& exists) {
  exists = true;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      exists = false;
      return std::string();
    }
    return Error{ErrorKind::kUnavailable, std::strerror(errno)};
  }
  struct stat info {};
  if (::fstat(fd, &info) == 0 && (info.st_mode & 077) != 0) {
    kTicketKeysLog.warn("the TLS ticket key file was readable by others: made private (0600)",
                        {{"path", path}});
    (void)::fchmod(fd, 0600);
  }
  std::string text;
  char buffer[4096];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      ::close(fd);
      return Error{ErrorKind::kUnavailable, std::strerror(error)};
    }
    if (got == 0) break;
    text.append(buffer, static_cast<size_t>(got));
    if (text.size() > 64 * 1024) break;  // far more than kMaxTicketKeys lines: parse rejects it
  }
  ::close(fd);
  return text;
}

}  // namespace

Result<TicketKey> makeTicketKey(int64_t now) {
  auto bytes = crypto::randomBytes(16 + 32 + 32);
  if (!bytes) return Error{ErrorKind::kInternal, "no random bytes for a TLS ticket key"};
  TicketKey key;
  std::copy_n(bytes->begin(), 16, key.name.begin());
  std::copy_n(bytes->begin() + 16, 32, key.aesKey.begin());
  std::copy_n(bytes->begin() + 48, 32, key.hmacKey.begin());
  key.createdAt = now;
  return key;
}

std::string formatTicketKeys(std::span<const TicketKey> keys) {
  std::string text(kHeader);
  text += '\n';
  for (const TicketKey& key : keys) {
    text += std::to_string(key.createdAt) + ' ' + crypto::toHex(key.name) + ' ' +
            crypto::toHex(key.aesKey) + ' ' + crypto::toHex(key.hmacKey) + '\n';
  }
  return text;
}

Result<std::vector<TicketKey>> parseTicketKeys(std::string_view text) {
  std::vector<TicketKey> keys;
  bool header = true;
  size_t lineNumber = 0;
  while (!text.empty()) {
    const size_t end = std::min(text.find('\n'), text.size());
    std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    ++lineNumber;
    if (header) {
      if (line != kHeader)
        return invalidFile("the first line is not \"" + std::string(kHeader) + "\"");
      header = false;
      continue;
    }
    if (line.empty()) continue;
    const auto words = splitWords(line);
    TicketKey key;
    const bool timeOk =
        words.size() == 4 &&
        std::from_chars(words[0].data(), words[0].data() + words[0].size(), key.createdAt).ec ==
            std::errc{};
    if (!timeOk || !fromHexInto(words[1], key.name) || !fromHexInto(words[2], key.aesKey) ||
        !fromHexInto(words[3], key.hmacKey)) {
      return invalidFile("line " + std::to_string(lineNumber) +
                         " is not \"<unix time> <name: 32 hex> <aes: 64 hex> <hmac: 64 hex>\"");
    }
    if (keys.size() == kMaxTicketKeys) {
      return invalidFile("more than " + std::to_string(kMaxTicketKeys) + " keys");
    }
    keys.push_back(key);
  }
  if (header) return invalidFile("the file is empty");
  if (keys.empty()) return invalidFile("the file holds no key");
  std::stable_sort(keys.begin(), keys.end(), [](const TicketKey& a, const TicketKey& b) {
    return a.createdAt > b.createdAt;
  });
  return keys;
}

TicketKeyStore::TicketKeyStore(std::string path, std::vector<TicketKey> keys)
    : path_(std::move(path)), keys_(std::move(keys)) {}

std::shared_ptr<TicketKeyStore> TicketKeyStore::open(const std::string& stateDir, int64_t now) {
  const std::filesystem::path directory(stateDir.empty() ? std::string(".") : stateDir);
  const std::string path = (directory / kTicketKeysFile).string();
  bool exists = false;
  std::vector<TicketKey> keys;
  if (auto text = readFile(path, exists); !text.ok()) {
    kTicketKeysLog.error(
        "cannot read the TLS ticket key file: starting with fresh keys (tickets given out "
        "before do not resume)",
        {{"path", path}, {"error", text.error().message}});
  } else if (exists) {
    auto parsed = parseTicketKeys(*text);
    if (parsed.ok()) {
      keys = std::move(parsed).value();
    } else {
      kTicketKeysLog.error(
          "the TLS ticket key file is damaged: starting with fresh keys (tickets given out "
          "before do not resume)",
          {{"path", path}, {"error", parsed.error().message}});
    }
  } else {
    std::error_code error;
    if (!std::filesystem::exists(directory, error)) {
      std::filesystem::create_directories(directory, error);
      if (!error) std::filesystem::permissions(directory, std::filesystem::perms::owner_all, error);
    }
  }
  const bool loaded = !keys.empty();
  std::shared_ptr<TicketKeyStore> store(new TicketKeyStore(path, std::move(keys)));
  store->dropExpired(now);  // not shared yet: no lock needed
  if (loaded && !store->keys_.empty()) {
    kTicketKeysLog.info("TLS ticket keys loaded",
                        {{"path", path}, {"keys", std::to_string(store->keys_.size())}});
  }
  (void)store->sealing(now);  // makes (and saves) the first key when none is usable
  return store;
}

void TicketKeyStore::dropExpired(int64_t now) {
  // A key seals for a rotation period, and its last ticket lives kTicketLifetimeSeconds more.
  std::erase_if(keys_, [now](const TicketKey& key) {
    return now - key.createdAt >= kTicketKeyRotationSeconds + kTicketLifetimeSeconds;
  });
}

std::optional<TicketKey> TicketKeyStore::sealing(int64_t now) {
  const std::lock_guard lock(mutex_);
  if (!keys_.empty() && now - keys_.front().createdAt < kTicketKeyRotationSeconds) {
    return keys_.front();
  }
  auto key = makeTicketKey(now);
  if (!key.ok()) {
    kTicketKeysLog.error("cannot make a TLS ticket key", {{"error", key.error().message}});
    if (keys_.empty()) return std::nullopt;
    return keys_.front();
  }
  dropExpired(now);
  keys_.insert(keys_.begin(), *key);
  if (keys_.size() > kMaxTicketKeys) keys_.resize(kMaxTicketKeys);
  kTicketKeysLog.info("TLS ticket key made",
                      {{"path", path_}, {"keys", std::to_string(keys_.size())}});
  save();
  return keys_.front();
}

std::optional<TicketKeyStore::Found> TicketKeyStore::find(std::span<const uint8_t> name) const {
  if (name.size() != 16) return std::nullopt;
  const std::lock_guard lock(mutex_);
  for (const TicketKey& key : keys_) {
    if (std::equal(name.begin(), name.end(), key.name.begin())) {
      return Found{key, &key == &keys_.front()};
    }
  }
  return std::nullopt;
}

std::vector<TicketKey> TicketKeyStore::keys() const {
  const std::lock_guard lock(mutex_);
  return keys_;
}

// A private temporary file beside the path, renamed over it: the file is whole or the old one.
// No fsync: this runs on relayd's loop (at startup, then once a day), and a key lost to a crash
// only costs the tickets it sealed a full handshake each.
void TicketKeyStore::save() const {
  const std::string text = formatTicketKeys(keys_);
  const std::string temporary = path_ + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const auto failed = [&](const char* what, int error) {
    kTicketKeysLog.error(
        "cannot save the TLS ticket keys: they live in this process only (a restart does "
        "not resume its tickets)",
        {{"path", path_}, {"step", what}, {"error", std::strerror(error)}});
  };
  if (fd < 0) return failed("create", errno);
  (void)::fchmod(fd, 0600);  // O_TRUNC on a leftover keeps its mode
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int writeError = errno;
  ::close(fd);
  if (!written || ::rename(temporary.c_str(), path_.c_str()) != 0) {
    const int error = written ? errno : writeError;
    ::unlink(temporary.c_str());
    return failed(written ? "rename" : "write", error);
  }
}

}  // namespace ot::relayd
