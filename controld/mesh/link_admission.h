// Whether a link whose hello just arrived may become the link to its machine (docs/mesh.md
// "Membership" and "Admission: one link per pair, the newer life wins"): the hello's address must
// be where the connection comes from (inbound: the peer's IP) or the address dialed (outbound),
// when MESH_VERIFY_ADDRESS is on; a machine ID linked already from another address is refused
// rather than taking its place; and when two links to one machine come up, both machines keep the
// same one: the newer life of the machine (started_at, then epoch), then the link dialed by the
// lower address. Pure.
#pragma once

#include <string>
#include <string_view>

#include "controld/mesh/link_frames.h"

namespace ot::mesh {

struct LinkFacts {
  Hello hello;
  bool outbound = false;
  std::string dialTarget;     // outbound: the canonical address dialed
  std::string remoteAddress;  // inbound: ip:port the connection came from
};

enum class Admission : uint8_t {
  kAccept,           // the machine's link from now on
  kReplaceExisting,  // accept, and close the existing link (it lost the tie-break)
  kBadAddress,       // the hello's address is not an ip:port
  kWrongAddress,     // not where the connection comes from / was dialed
  kAlreadyLinked,    // the machine is linked from another address
  kStaleLife,        // the existing link is of a newer life of the machine
  kDuplicate,        // the existing link of the same life wins the tie-break
};

[[nodiscard]] const char* admissionName(Admission admission);

// `existing`: the machine's current link, if any. `selfAddress`: this machine's canonical
// INTERNAL_ADDRESS (the dialer of its outbound links).
[[nodiscard]] Admission admitLink(const LinkFacts& candidate, const LinkFacts* existing,
                                  std::string_view selfAddress, bool verifyAddress);

}  // namespace ot::mesh
