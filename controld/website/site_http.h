// HTTP answers from the website's table (site_table.h): GET and HEAD, conditional GET with
// If-None-Match, the redirects to canonical paths, and the headers every page carries
// (docs/website.md). Pure: the router (api_router.h) calls it for paths no API route has.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "controld/api/api_types.h"
#include "controld/website/site_table.h"

namespace ot::controld {

// Every file is revalidated on each use (a 304 when unchanged costs a header), so a new
// deployment shows at once without versioned file names.
inline constexpr std::string_view kSiteCacheControl = "public, max-age=0, must-revalidate";

// Scripts, styles, images and API calls only from the site's own origin; no inline script or
// style, no frames, no plugins, no forms elsewhere.
inline constexpr std::string_view kSiteContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

// Whether an If-None-Match field value matches `etag` (RFC 9110 13.1.2: "*" matches, tags are
// compared weakly, so W/"x" matches "x"). A malformed list matches nothing from its first bad
// element on.
[[nodiscard]] bool ifNoneMatchMatches(std::string_view fieldValue, std::string_view etag);

// The site's answer to a request, or std::nullopt when the path is not the site's (the router
// then answers its 404). GET and HEAD: 200 with the file, 304 when an If-None-Match names its
// ETag, 307 to the canonical path (the query kept). Other methods: 405 with Allow: GET, HEAD.
[[nodiscard]] std::optional<ApiResponse> siteResponse(const SiteTable& site,
                                                      const ApiRequest& request);

}  // namespace ot::controld
