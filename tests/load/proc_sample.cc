#include "tests/load/proc_sample.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

namespace ot::load {
namespace {

// utime + stime of one /proc/.../stat line, in clock ticks; "" comm when unreadable.
uint64_t statTicks(const std::string& path, std::string* comm) {
  std::ifstream stat(path);
  std::string line;
  if (!std::getline(stat, line)) return 0;
  const size_t open = line.find('(');
  const size_t close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return 0;
  if (comm != nullptr) *comm = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  uint64_t ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::strtoull(field.c_str(), nullptr, 10);
  }
  return ticks;
}

// The CPU ticks of the process's threads whose name starts with `prefix`.
uint64_t threadTicks(const std::string& base, std::string_view prefix) {
  uint64_t ticks = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(base + "/task", ec)) {
    std::string comm;
    const uint64_t t = statTicks((entry.path() / "stat").string(), &comm);
    if (comm.rfind(prefix, 0) == 0) ticks += t;
  }
  return ticks;
}

}  // namespace

std::optional<ProcSample> sampleProcess(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  const std::string base = "/proc/" + std::to_string(pid);
  std::ifstream stat(base + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return std::nullopt;
  // Fields after the command (which may hold spaces) start after the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  uint64_t utime = 0;
  uint64_t stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) stime = std::strtoull(field.c_str(), nullptr, 10);
  }
  static const long ticks = sysconf(_SC_CLK_TCK);
  ProcSample sample;
  sample.cpuMicros = (utime + stime) * 1'000'000ull / static_cast<uint64_t>(ticks);
  sample.handshakeWorkerCpuMicros =
      threadTicks(base, "ot-handshake") * 1'000'000ull / static_cast<uint64_t>(ticks);
  std::ifstream status(base + "/status");
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      sample.rssKiB = std::strtoull(line.c_str() + 6, nullptr, 10);
      break;
    }
  }
  std::ifstream schedstat(base + "/schedstat");  // "<on cpu ns> <waiting ns> <slices>"
  uint64_t onCpuNs = 0;
  uint64_t waitingNs = 0;
  if (schedstat >> onCpuNs >> waitingNs) sample.runDelayMicros = waitingNs / 1000;
  return sample;
}

pid_t findByExe(const std::string& exePath) {
  std::error_code ec;
  const auto wanted = std::filesystem::canonical(exePath, ec);
  if (ec) return 0;
  pid_t best = 0;
  uint64_t bestStart = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code linkEc;
    const auto exe = std::filesystem::read_symlink(entry.path() / "exe", linkEc);
    if (linkEc || exe != wanted) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t close = line.rfind(')');
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    uint64_t start = 0;
    for (int i = 3; i <= 22 && rest >> field; ++i)
      if (i == 22) start = std::strtoull(field.c_str(), nullptr, 10);
    if (best == 0 || start > bestStart) {
      best = std::atoi(name.c_str());
      bestStart = start;
    }
  }
  return best;
}

pid_t readPidFile(const std::string& pidFile) {
  std::ifstream in(pidFile);
  long pid = 0;
  if (!(in >> pid)) return 0;
  return static_cast<pid_t>(pid);
}

std::optional<double> scrapeCounter(const std::string& hostPort, const std::string& metric,
                                    const std::string& labelFilter) {
  const size_t colon = hostPort.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(std::atoi(hostPort.c_str() + colon + 1)));
  if (inet_pton(AF_INET, hostPort.substr(0, colon).c_str(), &address.sin_addr) != 1)
    return std::nullopt;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  timeval timeout{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  std::string page;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: " + hostPort + "\r\n\r\n";
    if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(request.size())) {
      char buffer[16384];
      ssize_t n = 0;
      while ((n = ::recv(fd, buffer, sizeof buffer, 0)) > 0) page.append(buffer, size_t(n));
    }
  }
  ::close(fd);
  if (page.rfind("HTTP/1.", 0) != 0) return std::nullopt;
  double sum = 0;
  std::istringstream lines(page);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(metric, 0) != 0) continue;
    const char next = line.size() > metric.size() ? line[metric.size()] : '\0';
    if (next != '{' && next != ' ') continue;
    if (!labelFilter.empty() && line.find(labelFilter) == std::string::npos) continue;
    const size_t space = line.rfind(' ');
    sum += std::strtod(line.c_str() + space + 1, nullptr);
  }
  return sum;
}

}  // namespace ot::load
