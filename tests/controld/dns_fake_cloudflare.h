// A fake of Cloudflare's v4 DNS records API for the DNS tests: a blocking HTTP/1.1 server on
// 127.0.0.1:0 in a thread of its own, holding one zone's records in a map. It checks the bearer
// token and the JSON of creates, pages lists like Cloudflare (result_info), answers a missing
// record with 404 (or 400) and code 81044, and fails the next requests with a given status on
// demand. Every request is recorded ("GET /client/v4/zones/...").
#pragma once

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <deque>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ot::controld::testing {

class FakeCloudflare {
 public:
  struct Record {
    std::string name;
    std::string content;
    int64_t createdMs = 0;
  };

  FakeCloudflare(std::string zone, std::string token)
      : zone_(std::move(zone)), token_(std::move(token)) {
    listenFd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listenFd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    REQUIRE(::bind(listenFd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(listenFd_, 64) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(listenFd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
    REQUIRE(::pipe(wake_) == 0);
    thread_ = std::thread([this] { serve(); });
  }

  ~FakeCloudflare() {
    const char byte = 'x';
    (void)!::write(wake_[1], &byte, 1);
    thread_.join();
    ::close(listenFd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  FakeCloudflare(const FakeCloudflare&) = delete;
  FakeCloudflare& operator=(const FakeCloudflare&) = delete;

  [[nodiscard]] std::string baseUrl() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/client/v4";
  }
  [[nodiscard]] uint16_t port() const { return port_; }

  std::string addRecord(const std::string& name, const std::string& content, int64_t createdMs) {
    const std::lock_guard lock(mutex_);
    return addLocked(name, content, createdMs);
  }
  [[nodiscard]] std::map<std::string, Record> records() {
    const std::lock_guard lock(mutex_);
    return records_;
  }
  [[nodiscard]] std::vector<std::string> requests() {
    const std::lock_guard lock(mutex_);
    return requests_;
  }
  [[nodiscard]] std::vector<std::string> bodies() {
    const std::lock_guard lock(mutex_);
    return bodies_;
  }
  // The next `count` requests (after the token check) answer `status`, with Retry-After if set.
  void failNext(int status, const std::string& retryAfter, int count) {
    const std::lock_guard lock(mutex_);
    for (int i = 0; i < count; ++i) failures_.emplace_back(status, retryAfter);
  }
  // Cloudflare answers a delete of a missing record 404; some paths answer 400 with 81044.
  void setMissingStatus(int status) {
    const std::lock_guard lock(mutex_);
    missingStatus_ = status;
  }
  // The creation time of records created through the API.
  void setNow(int64_t ms) {
    const std::lock_guard lock(mutex_);
    nowMs_ = ms;
  }

  static std::string rfc3339(int64_t ms) {
    const time_t seconds = ms / 1000;
    std::tm tm{};
    gmtime_r(&seconds, &tm);
    char text[64];
    std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<int>(ms % 1000));
    return text;
  }

 private:
  struct Response {
    int status = 200;
    nlohmann::json body;
    std::string retryAfter;
  };

  std::string addLocked(const std::string& name, const std::string& content, int64_t createdMs) {
    char id[33];
    std::snprintf(id, sizeof id, "%032llx", static_cast<unsigned long long>(++nextId_));
    records_[id] = Record{name, content, createdMs};
    return id;
  }

  static nlohmann::json recordJson(const std::string& id, const Record& record, bool quoted) {
    return {{"id", id},
            {"type", "TXT"},
            {"name", record.name},
            {"content", quoted ? "\"" + record.content + "\"" : record.content},
            {"ttl", 60},
            {"proxied", false},
            {"created_on", rfc3339(record.createdMs)},
            {"modified_on", rfc3339(record.createdMs)}};
  }

  static Response failure(int status, int code, const std::string& message) {
    return {status,
            {{"success", false},
             {"errors", nlohmann::json::array({{{"code", code}, {"message", message}}})},
             {"messages", nlohmann::json::array()},
             {"result", nullptr}},
            ""};
  }

  static nlohmann::json success(nlohmann::json result) {
    return {{"success", true},
            {"errors", nlohmann::json::array()},
            {"messages", nlohmann::json::array()},
            {"result", std::move(result)}};
  }

  static std::string lower(std::string text) {
    for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return text;
  }

  static std::string decode(const std::string& text) {
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '%' && i + 2 < text.size()) {
        out.push_back(static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16)));
        i += 2;
      } else if (text[i] == '+') {
        out.push_back(' ');
      } else {
        out.push_back(text[i]);
      }
    }
    return out;
  }

  static std::map<std::string, std::string> query(const std::string& text) {
    std::map<std::string, std::string> params;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('&', start);
      if (end == std::string::npos) end = text.size();
      const std::string pair = text.substr(start, end - start);
      const size_t eq = pair.find('=');
      if (eq != std::string::npos) params[decode(pair.substr(0, eq))] = decode(pair.substr(eq + 1));
      start = end + 1;
    }
    return params;
  }

  Response route(const std::string& method, const std::string& target,
                 const std::map<std::string, std::string>& headers, const std::string& body) {
    const std::lock_guard lock(mutex_);
    requests_.push_back(method + " " + target);
    const auto auth = headers.find("authorization");
    if (auth == headers.end() || auth->second != "Bearer " + token_) {
      return failure(403, 10000, "Authentication error");
    }
    if (!failures_.empty()) {
      auto [status, retry_after] = failures_.front();
      failures_.pop_front();
      Response response = failure(status, status == 429 ? 971 : 10001, "injected failure");
      response.retryAfter = retry_after;
      return response;
    }
    const std::string prefix = "/client/v4/zones/" + zone_ + "/dns_records";
    const size_t question = target.find('?');
    const std::string path = target.substr(0, question);
    const auto params = query(question == std::string::npos ? "" : target.substr(question + 1));
    if (method == "POST" && path == prefix) {
      bodies_.push_back(body);
      const auto json = nlohmann::json::parse(body, nullptr, false);
      if (!json.is_object() || json.value("type", "") != "TXT" || !json.contains("ttl") ||
          json["ttl"] != 60 || !json.contains("name") || !json["name"].is_string() ||
          !json.contains("content") || !json["content"].is_string()) {
        return failure(400, 9000, "bad request body");
      }
      const std::string name = json["name"];
      const std::string content = json["content"];
      for (const auto& [id, record] : records_) {
        if (record.name == name && record.content == content) {
          return failure(400, 81058, "An identical record already exists.");
        }
      }
      const std::string id = addLocked(name, content, nowMs_);
      return {200, success(recordJson(id, records_[id], false)), ""};
    }
    if (method == "GET" && path == prefix) {
      std::vector<std::pair<std::string, Record>> matched;
      for (const auto& [id, record] : records_) {
        const std::string name = lower(record.name);
        if (params.count("type") != 0 && params.at("type") != "TXT") continue;
        if (params.count("name") != 0 && lower(params.at("name")) != name) continue;
        if (params.count("content") != 0 && params.at("content") != record.content) continue;
        if (params.count("name.startswith") != 0 &&
            name.rfind(lower(params.at("name.startswith")), 0) != 0) {
          continue;
        }
        if (params.count("name.endswith") != 0) {
          const std::string suffix = lower(params.at("name.endswith"));
          if (name.size() < suffix.size() ||
              name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
            continue;
          }
        }
        matched.emplace_back(id, record);
      }
      const size_t perPage =
          params.count("per_page") != 0 ? std::stoul(params.at("per_page")) : 100;
      const size_t page = params.count("page") != 0 ? std::stoul(params.at("page")) : 1;
      nlohmann::json result = nlohmann::json::array();
      for (size_t i = (page - 1) * perPage; i < matched.size() && i < page * perPage; ++i) {
        // Cloudflare has been seen to hand TXT content back in quotes; every other one is.
        result.push_back(recordJson(matched[i].first, matched[i].second, i % 2 == 1));
      }
      nlohmann::json reply = success(result);
      reply["result_info"] = {{"page", page},
                              {"per_page", perPage},
                              {"count", result.size()},
                              {"total_count", matched.size()},
                              {"total_pages", (matched.size() + perPage - 1) / perPage}};
      return {200, reply, ""};
    }
    if (method == "DELETE" && path.rfind(prefix + "/", 0) == 0) {
      const std::string id = path.substr(prefix.size() + 1);
      if (records_.erase(id) == 0) return failure(missingStatus_, 81044, "Record does not exist.");
      return {200, success({{"id", id}}), ""};
    }
    return failure(404, 7003, "Could not route to " + path);
  }

  void serve() {
    for (;;) {
      pollfd fds[2] = {{listenFd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) continue;
      if ((fds[1].revents & POLLIN) != 0) return;
      if ((fds[0].revents & POLLIN) == 0) continue;
      const int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      handle(fd);
      ::close(fd);
    }
  }

  void handle(int fd) {
    std::string data;
    char buffer[4096];
    size_t headerEnd = std::string::npos;
    while ((headerEnd = data.find("\r\n\r\n")) == std::string::npos) {
      const ssize_t got = ::read(fd, buffer, sizeof buffer);
      if (got <= 0) return;
      data.append(buffer, static_cast<size_t>(got));
    }
    std::map<std::string, std::string> headers;
    const std::string head = data.substr(0, headerEnd);
    size_t lineEnd = head.find("\r\n");
    const std::string requestLine = head.substr(0, lineEnd);
    while (lineEnd != std::string::npos) {
      const size_t next = head.find("\r\n", lineEnd + 2);
      const std::string line = head.substr(
          lineEnd + 2, next == std::string::npos ? std::string::npos : next - lineEnd - 2);
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        size_t value = colon + 1;
        while (value < line.size() && line[value] == ' ') ++value;
        headers[lower(line.substr(0, colon))] = line.substr(value);
      }
      lineEnd = next;
    }
    size_t length = 0;
    if (headers.count("content-length") != 0) length = std::stoul(headers["content-length"]);
    std::string body = data.substr(headerEnd + 4);
    while (body.size() < length) {
      const ssize_t got = ::read(fd, buffer, sizeof buffer);
      if (got <= 0) return;
      body.append(buffer, static_cast<size_t>(got));
    }
    const size_t space1 = requestLine.find(' ');
    const size_t space2 = requestLine.find(' ', space1 + 1);
    const Response response =
        route(requestLine.substr(0, space1), requestLine.substr(space1 + 1, space2 - space1 - 1),
              headers, body);
    const std::string text = response.body.dump();
    std::string out = "HTTP/1.1 " + std::to_string(response.status) +
                      " Fake\r\nContent-Type: application/json\r\nConnection: close\r\n"
                      "Content-Length: " +
                      std::to_string(text.size()) + "\r\n";
    if (!response.retryAfter.empty()) out += "Retry-After: " + response.retryAfter + "\r\n";
    out += "\r\n" + text;
    size_t sent = 0;
    while (sent < out.size()) {
      const ssize_t wrote = ::write(fd, out.data() + sent, out.size() - sent);
      if (wrote <= 0) return;
      sent += static_cast<size_t>(wrote);
    }
  }

  std::string zone_;
  std::string token_;
  int listenFd_ = -1;
  int wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::thread thread_;
  std::mutex mutex_;
  std::map<std::string, Record> records_;
  std::vector<std::string> requests_;
  std::vector<std::string> bodies_;
  std::deque<std::pair<int, std::string>> failures_;
  int missingStatus_ = 404;
  int64_t nowMs_ = 1'700'000'000'000;
  uint64_t nextId_ = 0;
};

}  // namespace ot::controld::testing
