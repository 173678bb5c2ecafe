// The website's files as controld serves them on the API domain (WEBSITE_DIR, docs/website.md):
// which URL path serves which file, its content type and its strong ETag. Pure: site_loader.h
// reads the directory, site_http.h answers requests from the table.
//
// URLs follow the HTML handling the site had on Cloudflare (auto-trailing-slash), so links made
// then keep working:
//   index.html          is served at /            and /index.html redirects there
//   docs/index.html     is served at /docs/       and /docs, /docs/index.html redirect there
//   status.html         is served at /status      and /status.html redirects there
//   style.css           is served at /style.css   (anything else at its own name)
// Names are refused unless every segment is made of [A-Za-z0-9._~-] and starts with neither a
// dot nor a tilde, so no URL needs percent-encoding and no hidden file is ever served.
//
// Built once at startup, then only read (safe from any number of threads).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "common/result.h"

namespace ot::controld {

struct SiteFile {
  std::string name;         // relative to the directory: "index.html", "docs/index.html"
  std::string body;         // the file's bytes
  std::string contentType;  // from the name's extension
  std::string etag;         // strong, quoted: "\"<32 hex digits of the body's SHA-256>\""
};

// The content type of a file name (by its extension; application/octet-stream when unknown).
// Text types carry charset=utf-8.
[[nodiscard]] std::string siteContentType(std::string_view name);

// A strong ETag for a body: its SHA-256, so equal bytes give equal tags on every machine.
[[nodiscard]] std::string siteEtag(std::string_view body);

// Whether `name` (a relative path with '/' separators) may be served; see the header comment.
[[nodiscard]] bool isSiteName(std::string_view name);

class SiteTable {
 public:
  // What a URL path resolves to: a file, a redirect to its canonical path, or nothing.
  struct Lookup {
    const SiteFile* file = nullptr;
    std::string redirect;  // non-empty: answer 307 to this path
  };

  // Adds a file. kInvalid when the name is not a site name or its URL (or a URL it redirects
  // from) is taken by a file added before ("a.html" and "a" both want /a).
  Status add(std::string name, std::string body);

  // The path as the request line has it, without the query; matched exactly (no decoding).
  [[nodiscard]] Lookup find(std::string_view path) const;

  [[nodiscard]] size_t files() const { return files_.size(); }
  [[nodiscard]] uint64_t bytes() const { return bytes_; }

 private:
  std::map<std::string, SiteFile, std::less<>> files_;         // canonical URL path -> file
  std::map<std::string, std::string, std::less<>> redirects_;  // URL path -> canonical path
  uint64_t bytes_ = 0;
};

}  // namespace ot::controld
