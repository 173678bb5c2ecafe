// The website on the API domain (docs/website.md): the URL rules of the site table, content types
// and ETags, conditional GETs and redirects (site_http.h), the router's fallback to the site with
// the API's 404 for anything else, and the loader's bounds and refusals (symlinks out of the
// directory, hidden files, sizes).
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "controld/api/api_router.h"
#include "controld/website/site_http.h"
#include "controld/website/site_loader.h"
#include "controld/website/site_table.h"
#include "tests/controld/test_database.h"

namespace ot::controld {
namespace {

namespace fs = std::filesystem;

SiteTable sampleSite() {
  SiteTable site;
  REQUIRE(site.add("index.html", "<h1>home</h1>").ok());
  REQUIRE(site.add("status.html", "<h1>status</h1>").ok());
  REQUIRE(site.add("style.css", "body{}").ok());
  REQUIRE(site.add("status.js", "let a;").ok());
  REQUIRE(site.add("docs/index.html", "<h1>docs</h1>").ok());
  REQUIRE(site.add("img/logo.svg", "<svg/>").ok());
  return site;
}

ApiRequest get(std::string path, std::string method = "GET") {
  ApiRequest request;
  request.method = std::move(method);
  const size_t question = path.find('?');
  if (question != std::string::npos) {
    request.query = path.substr(question + 1);
    path.resize(question);
  }
  request.path = std::move(path);
  return request;
}

std::string header(const ApiResponse& response, const std::string& name) {
  for (const auto& [key, value] : response.headers) {
    if (key == name) return value;
  }
  return "";
}

TEST_CASE("website: URL rules follow the auto-trailing-slash HTML handling") {
  const SiteTable site = sampleSite();
  const auto file = [&](std::string_view path) {
    const SiteTable::Lookup found = site.find(path);
    return found.file != nullptr ? found.file->name : std::string();
  };
  const auto redirect = [&](std::string_view path) { return site.find(path).redirect; };

  CHECK(file("/") == "index.html");
  CHECK(file("/status") == "status.html");
  CHECK(file("/style.css") == "style.css");
  CHECK(file("/docs/") == "docs/index.html");
  CHECK(file("/img/logo.svg") == "img/logo.svg");

  CHECK(redirect("/index.html") == "/");
  CHECK(redirect("/index") == "/");
  CHECK(redirect("/status.html") == "/status");
  CHECK(redirect("/docs") == "/docs/");
  CHECK(redirect("/docs/index.html") == "/docs/");

  for (const char* missing : {"/nope", "/status/", "/STYLE.css", "/style.css/", "//", "/img/",
                              "/img", "/%73tatus", "/../index.html", "/docs//", ""}) {
    CAPTURE(missing);
    const SiteTable::Lookup found = site.find(missing);
    CHECK(found.file == nullptr);
    CHECK(found.redirect.empty());
  }
  CHECK(site.files() == 6);
}

TEST_CASE("website: names that cannot be served, and URLs two files would share, are refused") {
  for (const char* name : {"", ".env", "a/.git/config", "a//b", "/abs.html", "a b.html", "dir/../x",
                           "ü.html", "~backup", "a/", "q?.html", "p%20.html"}) {
    CAPTURE(name);
    SiteTable site;
    CHECK_FALSE(site.add(name, "x").ok());
  }
  SiteTable site;
  REQUIRE(site.add("about.html", "a").ok());
  CHECK_FALSE(site.add("about", "b").ok());  // both want /about
  REQUIRE(site.add("guide", "c").ok());
  CHECK_FALSE(site.add("guide.html", "d").ok());
  REQUIRE(site.add("docs/index.html", "e").ok());
  CHECK_FALSE(site.add("docs", "f").ok());  // /docs redirects to /docs/
  CHECK(site.files() == 3);
}

TEST_CASE("website: content types and strong ETags") {
  CHECK(siteContentType("index.html") == "text/html; charset=utf-8");
  CHECK(siteContentType("a/b.CSS") == "text/css; charset=utf-8");
  CHECK(siteContentType("status.js") == "text/javascript; charset=utf-8");
  CHECK(siteContentType("logo.svg") == "image/svg+xml");
  CHECK(siteContentType("photo.jpeg") == "image/jpeg");
  CHECK(siteContentType("font.woff2") == "font/woff2");
  CHECK(siteContentType("README") == "application/octet-stream");

  const std::string etag = siteEtag("hello");
  CHECK(etag.size() == 34);
  CHECK(etag.front() == '"');
  CHECK(etag.back() == '"');
  CHECK(etag.find("W/") == std::string::npos);
  CHECK(siteEtag("hello") == etag);  // the same bytes: the same tag, on every machine
  CHECK(siteEtag("hello!") != etag);
}

TEST_CASE("website: If-None-Match is compared weakly, lists and * included") {
  const std::string etag = "\"abc\"";
  CHECK(ifNoneMatchMatches("\"abc\"", etag));
  CHECK(ifNoneMatchMatches("W/\"abc\"", etag));
  CHECK(ifNoneMatchMatches("\"x\", \"abc\"", etag));
  CHECK(ifNoneMatchMatches("\"x\",W/\"abc\" ", etag));
  CHECK(ifNoneMatchMatches("*", etag));
  CHECK(ifNoneMatchMatches("\"a,b\", \"abc\"", etag));  // a comma inside a tag is part of it
  CHECK_FALSE(ifNoneMatchMatches("\"abcd\"", etag));
  CHECK_FALSE(ifNoneMatchMatches("abc", etag));
  CHECK_FALSE(ifNoneMatchMatches("", etag));
  CHECK_FALSE(ifNoneMatchMatches("\"abc", etag));
  CHECK_FALSE(ifNoneMatchMatches("junk, \"abc\"", etag));  // malformed from its first element on
}

TEST_CASE("website: GET, HEAD, 304, redirects and other methods") {
  const SiteTable site = sampleSite();

  const auto page = siteResponse(site, get("/status"));
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK(page->body == "<h1>status</h1>");
  CHECK(header(*page, "Content-Type") == "text/html; charset=utf-8");
  const std::string etag = header(*page, "ETag");
  CHECK(etag == siteEtag("<h1>status</h1>"));
  CHECK(header(*page, "Cache-Control") == kSiteCacheControl);
  CHECK(header(*page, "Content-Security-Policy").find("script-src 'self'") != std::string::npos);
  CHECK(header(*page, "X-Content-Type-Options") == "nosniff");
  CHECK(header(*page, "Referrer-Policy") == "no-referrer");

  // HEAD gets the GET's answer; the HTTP server sends its head only (with Content-Length).
  const auto head = siteResponse(site, get("/status", "HEAD"));
  REQUIRE(head);
  CHECK(head->status == 200);
  CHECK(header(*head, "ETag") == etag);

  ApiRequest conditional = get("/status");
  conditional.headers.emplace_back("if-none-match", "\"other\", " + etag);
  const auto notModified = siteResponse(site, conditional);
  REQUIRE(notModified);
  CHECK(notModified->status == 304);
  CHECK(notModified->body.empty());
  CHECK(header(*notModified, "ETag") == etag);
  CHECK(header(*notModified, "Cache-Control") == kSiteCacheControl);

  ApiRequest stale = get("/status");
  stale.headers.emplace_back("If-None-Match", siteEtag("an older version"));
  CHECK(siteResponse(site, stale)->status == 200);

  const auto moved = siteResponse(site, get("/status.html?tab=usage"));
  REQUIRE(moved);
  CHECK(moved->status == 307);
  CHECK(header(*moved, "Location") == "/status?tab=usage");
  CHECK(siteResponse(site, get("/index.html"))->status == 307);
  CHECK(header(*siteResponse(site, get("/index.html")), "Location") == "/");

  const auto posted = siteResponse(site, get("/status", "POST"));
  REQUIRE(posted);
  CHECK(posted->status == 405);
  CHECK(header(*posted, "Allow") == "GET, HEAD");

  CHECK_FALSE(siteResponse(site, get("/missing")).has_value());
}

TEST_CASE("website: the router answers its own paths first and the API's 404 after the site") {
  ApiRouter router;
  router.add({"GET", "/health",
              RouteDoc{"health", "", "", "", false, {}, {}, {{200, "ok", "", {}}}},
              [](const ApiRequest&, const PathParams&) { return ApiResponse::json(200, "{}"); }});
  auto site = std::make_shared<const SiteTable>(sampleSite());
  CHECK(router.handle(get("/")).status == 404);  // no website: the root is an unknown path
  router.setFallback([site](const ApiRequest& request) { return siteResponse(*site, request); });

  CHECK(router.handle(get("/health")).body == "{}");
  const ApiResponse root = router.handle(get("/"));
  CHECK(root.status == 200);
  CHECK(root.body == "<h1>home</h1>");
  const ApiResponse missing = router.handle(get("/api/nothing"));
  CHECK(missing.status == 404);
  const auto body = nlohmann::json::parse(missing.body);
  CHECK(body["_tag"] == "NotFoundError");
  CHECK(header(missing, "Content-Type") == "application/json");
  CHECK(router.handle(get("/health", "POST")).status == 405);  // a route's path stays the API's
}

// A fresh directory for one loader test, removed afterwards.
struct SiteDir {
  SiteDir() {
    std::string pattern = (fs::temp_directory_path() / "ot-site-XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    root = pattern;
    site = root / "site";
    fs::create_directories(site);
  }
  ~SiteDir() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
  void write(const std::string& name, const std::string& body) const {
    const fs::path path = site / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << body;
  }
  fs::path root;
  fs::path site;
};

TEST_CASE("website: the loader reads the directory into memory, hidden files skipped") {
  SiteDir dir;
  dir.write("index.html", "<h1>home</h1>");
  dir.write("status.html", "<p>s</p>");
  dir.write("css/style.css", "body{}");
  dir.write(".env", "SECRET=1");
  dir.write(".git/config", "[core]");
  dir.write("css/.hidden.css", "x");
  fs::create_symlink("status.html", dir.site / "alias.html");  // inside the directory: served

  auto loaded = loadSite(dir.site.string());
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().message);
  CHECK(loaded->files() == 4);
  CHECK(loaded->find("/").file->body == "<h1>home</h1>");
  CHECK(loaded->find("/css/style.css").file->body == "body{}");
  CHECK(loaded->find("/alias").file->body == "<p>s</p>");
  CHECK(loaded->find("/.env").file == nullptr);
  CHECK(loaded->find("/.git/config").file == nullptr);

  // In memory: the files may go, the site stays.
  fs::remove(dir.site / "index.html");
  CHECK(loaded->find("/").file->body == "<h1>home</h1>");
}

TEST_CASE("website: the loader refuses symlinks out of the directory, odd names and the bounds") {
  SUBCASE("a symlinked file outside") {
    SiteDir dir;
    dir.write("index.html", "ok");
    std::ofstream(dir.root / "secret.txt") << "private";
    fs::create_symlink(dir.root / "secret.txt", dir.site / "leak.txt");
    auto loaded = loadSite(dir.site.string());
    REQUIRE_FALSE(loaded.ok());
    CHECK(loaded.error().message.find("symlink out of the directory") != std::string::npos);
  }
  SUBCASE("a symlinked directory outside, through ..") {
    SiteDir dir;
    fs::create_directories(dir.root / "elsewhere");
    fs::create_directory_symlink("../elsewhere", dir.site / "more");
    CHECK_FALSE(loadSite(dir.site.string()).ok());
  }
  SUBCASE("a broken symlink") {
    SiteDir dir;
    fs::create_symlink(dir.site / "nowhere.html", dir.site / "broken.html");
    CHECK_FALSE(loadSite(dir.site.string()).ok());
  }
  SUBCASE("a name the site cannot serve") {
    SiteDir dir;
    dir.write("my page.html", "x");
    CHECK_FALSE(loadSite(dir.site.string()).ok());
  }
  SUBCASE("a file over the size cap") {
    SiteDir dir;
    dir.write("big.bin", std::string(2000, 'x'));
    SiteLimits limits;
    limits.maxFileBytes = 1999;
    CHECK_FALSE(loadSite(dir.site.string(), limits).ok());
    limits.maxFileBytes = 2000;
    CHECK(loadSite(dir.site.string(), limits).ok());
  }
  SUBCASE("more bytes in all than the cap") {
    SiteDir dir;
    dir.write("a.txt", std::string(600, 'a'));
    dir.write("b.txt", std::string(600, 'b'));
    SiteLimits limits;
    limits.maxTotalBytes = 1000;
    CHECK_FALSE(loadSite(dir.site.string(), limits).ok());
  }
  SUBCASE("more files than the cap") {
    SiteDir dir;
    for (int i = 0; i < 4; ++i) dir.write("f" + std::to_string(i) + ".txt", "x");
    SiteLimits limits;
    limits.maxFiles = 3;
    CHECK_FALSE(loadSite(dir.site.string(), limits).ok());
  }
  SUBCASE("no such directory") {
    CHECK_FALSE(loadSite("/nonexistent/ot-site").ok());
  }
}

TEST_CASE("website: the repository's website/ loads and serves its pages") {
  auto loaded = loadSite(OT_SOURCE_DIR "/website");
  REQUIRE_MESSAGE(loaded.ok(), loaded.error().message);
  for (const char* path : {"/", "/status", "/status.js", "/style.css"}) {
    CAPTURE(path);
    CHECK(loaded->find(path).file != nullptr);
  }
}

}  // namespace
}  // namespace ot::controld
