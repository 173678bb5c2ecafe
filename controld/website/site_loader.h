// Reads WEBSITE_DIR into a SiteTable once, at startup, so serving never touches the disk
// (docs/website.md). Bounded: at most max_files files, each at most max_file_bytes (relayd takes
// answers of 16 MiB at most), max_total_bytes in all. Hidden names (a segment starting with '.')
// are skipped. Refused, failing the whole load so controld does not start half a site: a symlink
// whose target is outside the directory, anything that is neither a regular file nor a directory
// (after following a symlink inside it), a name the site cannot serve (site_table.h), and the
// bounds above. Symlinked directories are not entered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/result.h"
#include "controld/website/site_table.h"

namespace ot::controld {

struct SiteLimits {
  size_t maxFiles = 1000;
  uint64_t maxFileBytes = 8ull << 20;
  uint64_t maxTotalBytes = 32ull << 20;
};

// Blocks on the disk: startup only.
[[nodiscard]] Result<SiteTable> loadSite(const std::string& directory,
                                         const SiteLimits& limits = {});

}  // namespace ot::controld
