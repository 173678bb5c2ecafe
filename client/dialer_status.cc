#include "client/dialer_status.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "client/status_line.h"

namespace ot::client {
namespace {

using nlohmann::json;

Error corrupt(std::string why) {
  return Error{ErrorKind::kInvalid, "status file: " + std::move(why)};
}

std::string pad(std::string text, size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text;
}

}  // namespace

std::string statusFilePath(const std::string& stateDir, const std::string& tunnelId) {
  return stateDir + "/" + tunnelId + ".status.json";
}

std::string statusToJson(const DialerStatus& status, uint64_t updatedUnixMs, int pid) {
  json profiles = json::array();
  for (const ProfileStatus& profile : status.profiles) {
    json addresses = json::array();
    for (const AddressStatus& address : profile.addresses) {
      addresses.push_back({{"address", address.address},
                           {"wanted", address.wanted},
                           {"attached", address.attached},
                           {"streams", address.streams},
                           {"nextTryMs", address.nextTryMs},
                           {"lastError", address.lastError}});
    }
    json entry = {{"name", profile.name},
                  {"index", profile.index},
                  {"host", profile.host},
                  {"port", profile.port},
                  {"sni", profile.sni},
                  {"resolveError", profile.resolveError},
                  {"addresses", std::move(addresses)}};
    if (profile.listen) {
      entry["listen"] = true;
      entry["refused"] = profile.refused;
    }
    profiles.push_back(std::move(entry));
  }
  const json document = {{"tunnelId", status.tunnelId},
                         {"origin", status.origin},
                         {"credential", status.credential},
                         {"updatedUnixMs", updatedUnixMs},
                         {"pid", pid},
                         {"profiles", std::move(profiles)}};
  return document.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

Result<StatusFile> parseStatusJson(const std::string& text) {
  const json document = json::parse(text, nullptr, false);
  if (!document.is_object()) return corrupt("not a JSON object");
  StatusFile file;
  try {
    file.status.tunnelId = document.at("tunnelId").get<std::string>();
    file.status.origin = document.at("origin").get<std::string>();
    file.status.credential = document.value("credential", false);
    file.updatedUnixMs = document.at("updatedUnixMs").get<uint64_t>();
    file.pid = document.value("pid", 0);
    for (const json& p : document.at("profiles")) {
      ProfileStatus profile;
      profile.name = p.at("name").get<std::string>();
      profile.index = p.value("index", 0U);
      profile.host = p.value("host", "");
      profile.port = p.value("port", static_cast<uint16_t>(0));
      profile.sni = p.value("sni", "");
      profile.resolveError = p.value("resolveError", "");
      profile.listen = p.value("listen", false);
      profile.refused = p.value("refused", uint64_t{0});
      for (const json& a : p.at("addresses")) {
        AddressStatus address;
        address.address = a.at("address").get<std::string>();
        address.wanted = a.value("wanted", 0);
        address.attached = a.value("attached", 0);
        address.streams = a.value("streams", 0);
        address.nextTryMs = a.value("nextTryMs", uint64_t{0});
        address.lastError = a.value("lastError", "");
        profile.addresses.push_back(std::move(address));
      }
      file.status.profiles.push_back(std::move(profile));
    }
  } catch (const json::exception& e) {
    return corrupt(e.what());
  }
  return file;
}

bool statusStale(uint64_t updatedUnixMs, uint64_t nowUnixMs) {
  return nowUnixMs > updatedUnixMs && nowUnixMs - updatedUnixMs > kStatusStaleMs;
}

std::string renderStatusTable(const StatusFile& file, uint64_t nowUnixMs) {
  const DialerStatus& status = file.status;
  const uint64_t age = nowUnixMs > file.updatedUnixMs ? nowUnixMs - file.updatedUnixMs : 0;
  std::string out = "tunnel " + status.tunnelId + ", origin " + status.origin +
                    (status.credential ? " (origin credential)" : " (tunnel token)") + ": ";
  if (statusStale(file.updatedUnixMs, nowUnixMs)) {
    out += "not running (last report " + formatSeconds(age) + " s ago)\n";
    return out;
  }
  out += "running (pid " + std::to_string(file.pid) + ")\n";
  out += pad("PROFILE", 12) + pad("ADDRESS", 42) + pad("LINKS", 8) + pad("STREAMS", 9) +
         pad("NEXT TRY", 10) + "LAST ERROR\n";
  for (const ProfileStatus& profile : status.profiles) {
    const std::string name = std::to_string(profile.index) + ":" + profile.name;
    if (profile.addresses.empty()) {
      out += pad(name, 12) + pad(profile.host + " (unresolved)", 42) + pad("-", 8) + pad("-", 9) +
             pad("-", 10) + profile.resolveError + "\n";
    }
    for (const AddressStatus& address : profile.addresses) {
      const std::string links =
          std::to_string(address.attached) + "/" + std::to_string(address.wanted);
      const std::string next =
          address.nextTryMs == 0 ? "-" : formatSeconds(address.nextTryMs) + " s";
      out += pad(name, 12) + pad(address.address + " port " + std::to_string(profile.port), 42) +
             pad(links, 8) + pad(std::to_string(address.streams), 9) + pad(next, 10) +
             (address.lastError.empty() ? "-" : address.lastError) +
             (profile.refused == 0 ? ""
                                   : " (" + std::to_string(profile.refused) +
                                         " connections over the cap closed at accept)") +
             "\n";
    }
  }
  return out;
}

}  // namespace ot::client
