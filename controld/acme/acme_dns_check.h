// Whether DNS-01 records are visible yet, asked of one resolver before the challenges are
// answered (answering early gets the authorization marked invalid, and it sticks for a while).
// ACME_DNS_RESOLVER (an IPv4 host:port, e.g. challtestsrv's DNS port) names the resolver to ask;
// empty uses the system's (/etc/resolv.conf). Blocking (res_nquery over UDP); any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/result.h"

namespace ot::controld {

// The TXT strings of `name` (each record's strings joined). An empty list when the name has no
// TXT records (NXDOMAIN, NODATA); kUnavailable when the resolver does not answer, kInvalid for a
// resolver that is not an IPv4 host:port.
[[nodiscard]] Result<std::vector<std::string>> lookupTxt(const std::string& resolver,
                                                         const std::string& name);

// The TXT strings in a DNS answer message (pure, for tests); kInvalid when it is malformed.
[[nodiscard]] Result<std::vector<std::string>> parseTxtAnswer(std::span<const uint8_t> message);

}  // namespace ot::controld
