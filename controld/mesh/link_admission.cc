#include "controld/mesh/link_admission.h"

#include "common/ip_address.h"
#include "controld/mesh/mesh_settings.h"

namespace ot::mesh {
namespace {

std::optional<IpAddress> hostIp(std::string_view address) {
  const auto parsed = parseHostPort(address);
  return parsed ? parseIpAddress(parsed->host) : std::nullopt;
}

bool newer(const Hello& a, const Hello& b) {
  if (a.startedAtMs != b.startedAtMs) return a.startedAtMs > b.startedAtMs;
  return a.epoch > b.epoch;
}

// Who dialed the link: this machine for its outbound links, the peer (its hello address) else.
std::string dialer(const LinkFacts& link, std::string_view selfAddress) {
  if (link.outbound) return std::string(selfAddress);
  return canonicalAddress(link.hello.address).value_or(link.hello.address);
}

}  // namespace

const char* admissionName(Admission admission) {
  switch (admission) {
    case Admission::kAccept:
      return "accept";
    case Admission::kReplaceExisting:
      return "replace_existing";
    case Admission::kBadAddress:
      return "bad_address";
    case Admission::kWrongAddress:
      return "wrong_address";
    case Admission::kAlreadyLinked:
      return "already_linked";
    case Admission::kStaleLife:
      return "stale_life";
    case Admission::kDuplicate:
      return "duplicate";
  }
  return "accept";
}

Admission admitLink(const LinkFacts& candidate, const LinkFacts* existing,
                    std::string_view selfAddress, bool verifyAddress) {
  const auto address = canonicalAddress(candidate.hello.address);
  const auto ip = hostIp(candidate.hello.address);
  if (!address || !ip) return Admission::kBadAddress;
  if (verifyAddress) {
    if (candidate.outbound) {
      if (*address != candidate.dialTarget) return Admission::kWrongAddress;
    } else {
      const auto remote = hostIp(candidate.remoteAddress);
      if (!remote || !(*remote == *ip)) return Admission::kWrongAddress;
    }
  }
  if (existing == nullptr) return Admission::kAccept;
  if (canonicalAddress(existing->hello.address) != address) return Admission::kAlreadyLinked;
  if (newer(candidate.hello, existing->hello)) return Admission::kReplaceExisting;
  if (newer(existing->hello, candidate.hello)) return Admission::kStaleLife;
  const std::string candidateDialer = dialer(candidate, selfAddress);
  const std::string existingDialer = dialer(*existing, selfAddress);
  if (candidateDialer == existingDialer) return Admission::kDuplicate;  // keep the first
  return addressLess(candidateDialer, existingDialer) ? Admission::kReplaceExisting
                                                      : Admission::kDuplicate;
}

}  // namespace ot::mesh
