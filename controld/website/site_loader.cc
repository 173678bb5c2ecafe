#include "controld/website/site_loader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>
#include <utility>

namespace ot::controld {
namespace {

namespace fs = std::filesystem;

Error refused(std::string message) {
  return Error{ErrorKind::kInvalid, "WEBSITE_DIR: " + std::move(message)};
}

// `path` is `root` or below it (both canonical).
bool within(const fs::path& path, const fs::path& root) {
  return std::mismatch(root.begin(), root.end(), path.begin(), path.end()).first == root.end();
}

Result<std::string> readFile(const fs::path& path, uint64_t maxBytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return refused("cannot read " + path.string());
  std::string body;
  char buffer[65536];
  while (in) {
    in.read(buffer, sizeof buffer);
    body.append(buffer, static_cast<size_t>(in.gcount()));
    // Checked while reading: the file may have grown since its size was looked at.
    if (body.size() > maxBytes) {
      return refused(path.string() + " is larger than " + std::to_string(maxBytes) + " bytes");
    }
  }
  if (in.bad()) return refused("cannot read " + path.string());
  return body;
}

bool hidden(const fs::path& relative) {
  for (const fs::path& part : relative) {
    const std::string text = part.string();
    if (!text.empty() && text.front() == '.') return true;
  }
  return false;
}

}  // namespace

Result<SiteTable> loadSite(const std::string& directory, const SiteLimits& limits) {
  std::error_code error;
  const fs::path root = fs::canonical(directory, error);
  if (error) return refused(directory + ": " + error.message());
  if (!fs::is_directory(root, error)) return refused(directory + " is not a directory");

  SiteTable table;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, error);
  if (error) return refused(directory + ": " + error.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(error)) {
    if (error) return refused(directory + ": " + error.message());
    const fs::directory_entry& entry = *it;
    const fs::path relative = entry.path().lexically_relative(root);
    if (hidden(relative)) {
      if (entry.is_directory(error) && !entry.is_symlink(error)) it.disable_recursion_pending();
      continue;
    }
    fs::path target = entry.path();
    if (entry.is_symlink(error)) {
      target = fs::canonical(entry.path(), error);
      if (error) return refused(relative.string() + ": a broken symlink");
      if (!within(target, root)) {
        return refused(relative.string() + " is a symlink out of the directory");
      }
    }
    const fs::file_status status = fs::status(target, error);
    if (error) return refused(relative.string() + ": " + error.message());
    if (fs::is_directory(status)) continue;  // real ones are walked; symlinked ones are not
    if (!fs::is_regular_file(status)) {
      return refused(relative.string() + " is not a regular file");
    }
    if (table.files() >= limits.maxFiles) {
      return refused("more than " + std::to_string(limits.maxFiles) + " files");
    }
    auto body = readFile(target, limits.maxFileBytes);
    if (!body) return body.error();
    if (table.bytes() + body->size() > limits.maxTotalBytes) {
      return refused("more than " + std::to_string(limits.maxTotalBytes) + " bytes in all");
    }
    if (auto added = table.add(relative.generic_string(), std::move(body).value()); !added) {
      return refused(added.error().message);
    }
  }
  if (error) return refused(directory + ": " + error.message());
  return table;
}

}  // namespace ot::controld
