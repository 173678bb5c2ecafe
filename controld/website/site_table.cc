#include "controld/website/site_table.h"

#include <array>
#include <utility>
#include <vector>

#include "common/crypto.h"
#include "common/text.h"

namespace ot::controld {
namespace {

constexpr std::string_view kIndex = "index.html";
constexpr std::string_view kHtml = ".html";

bool endsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-' || c == '~';
}

bool isSegment(std::string_view segment) {
  if (segment.empty() || segment.front() == '.' || segment.front() == '~') return false;
  for (char c : segment) {
    if (!isNameChar(c)) return false;
  }
  return true;
}

Error refusedSite(std::string message) {
  return Error{ErrorKind::kInvalid, std::move(message)};
}

}  // namespace

std::string siteContentType(std::string_view name) {
  struct Type {
    std::string_view extension;
    std::string_view contentType;
  };
  static constexpr std::array<Type, 19> kTypes = {{
      {".html", "text/html; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"},
      {".json", "application/json"},
      {".txt", "text/plain; charset=utf-8"},
      {".xml", "application/xml"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".jpg", "image/jpeg"},
      {".jpeg", "image/jpeg"},
      {".gif", "image/gif"},
      {".webp", "image/webp"},
      {".ico", "image/x-icon"},
      {".woff", "font/woff"},
      {".woff2", "font/woff2"},
      {".webmanifest", "application/manifest+json"},
      {".wasm", "application/wasm"},
      {".pdf", "application/pdf"},
  }};
  const std::string lower = toLower(name);
  for (const Type& type : kTypes) {
    if (endsWith(lower, type.extension)) return std::string(type.contentType);
  }
  return "application/octet-stream";
}

std::string siteEtag(std::string_view body) {
  const crypto::Sha256Digest digest = crypto::sha256(body);
  // 128 bits of the digest: plenty to tell versions of a file apart, and a shorter header.
  return "\"" + crypto::toHex(std::span<const uint8_t>(digest.data(), 16)) + "\"";
}

bool isSiteName(std::string_view name) {
  if (name.empty()) return false;
  size_t start = 0;
  while (true) {
    const size_t slash = name.find('/', start);
    const std::string_view segment = name.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (!isSegment(segment)) return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

Status SiteTable::add(std::string name, std::string body) {
  if (!isSiteName(name)) return refusedSite("not a name the website serves: " + name);

  // The canonical URL and the URLs that redirect to it.
  std::string canonical;
  std::vector<std::string> aliases;
  const std::string_view view(name);
  if (view == kIndex || endsWith(view, "/" + std::string(kIndex))) {
    const std::string directory(view.substr(0, view.size() - kIndex.size()));  // "" or "docs/"
    canonical = "/" + directory;
    aliases.push_back("/" + name);
    aliases.push_back("/" + directory + "index");
    if (!directory.empty()) aliases.push_back("/" + directory.substr(0, directory.size() - 1));
  } else if (endsWith(view, kHtml)) {
    canonical = "/" + name.substr(0, name.size() - kHtml.size());
    aliases.push_back("/" + name);
  } else {
    canonical = "/" + name;
  }

  const auto taken = [this](const std::string& path) {
    return files_.count(path) != 0 || redirects_.count(path) != 0;
  };
  if (taken(canonical)) return refusedSite(name + ": its URL " + canonical + " is taken already");
  for (const std::string& alias : aliases) {
    if (taken(alias) || alias == canonical) {
      return refusedSite(name + ": the URL " + alias + " is taken already");
    }
  }

  for (std::string& alias : aliases) redirects_.emplace(std::move(alias), canonical);
  bytes_ += body.size();
  SiteFile file;
  file.contentType = siteContentType(name);
  file.etag = siteEtag(body);
  file.name = std::move(name);
  file.body = std::move(body);
  files_.emplace(std::move(canonical), std::move(file));
  return Ok{};
}

SiteTable::Lookup SiteTable::find(std::string_view path) const {
  Lookup lookup;
  if (const auto file = files_.find(path); file != files_.end()) {
    lookup.file = &file->second;
  } else if (const auto redirect = redirects_.find(path); redirect != redirects_.end()) {
    lookup.redirect = redirect->second;
  }
  return lookup;
}

}  // namespace ot::controld
