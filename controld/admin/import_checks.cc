#include "controld/admin/import_checks.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <utility>
#include <vector>

#include "controld/issuance/csr_check.h"

namespace ot::controld {
namespace {

Error refuse(std::string reason) {
  return Error{ErrorKind::kInvalid, std::move(reason)};
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

bool isSha256Hex(std::string_view text) {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

Result<TunnelRecord> checkImportedRecord(const BackupRow& row, std::string_view domain) {
  if (!isValidTunnelId(row.id)) return refuse("tunnel ID is not one DNS label");
  Result<TunnelRecord> parsed = tunnelRecordFromJson(row.recordJson);
  if (!parsed) return refuse("unreadable record: " + parsed.error().message);
  TunnelRecord record = std::move(parsed).value();
  if (record.id != row.id) return refuse("the record's id is not the line's id");
  // Byte for byte what the server writes: no extra or missing keys, no other order or spelling.
  if (toJson(record) != row.recordJson) return refuse("record is not in the server's form");

  const std::string host = record.id + "." + lowercase(domain);
  if (record.hostname != host) return refuse("hostname is not <id>.<domain>");
  if (!isSha256Hex(record.tokenSha256Hex)) {
    return refuse("token hash is not a SHA-256 (64 lowercase hex digits)");
  }

  if (auto broken = checkPool(record)) return refuse("pool: " + *broken);

  const CertificateInfo& certificate = record.certificate;
  const std::string wildcard = "*." + host;
  std::set<std::string> seen;
  for (const std::string& name : certificate.identifiers) {
    if (name != host && name != wildcard) {
      return refuse("identifier " + name + " is not <id>.<domain> or *.<id>.<domain>");
    }
    if (!seen.insert(name).second) return refuse("identifier " + name + " is listed twice");
  }
  if (certificate.csrPem.empty()) {
    if (!certificate.identifiers.empty()) return refuse("identifiers without a CSR");
    return record;
  }
  auto csr = checkTunnelCsr(certificate.csrPem, record.id, domain);
  if (!csr) return refuse("CSR refused: " + csr.error().message);
  if (certificate.csrSha256 != csr->derSha256Hex) return refuse("csrSha256 is not the CSR's");
  if (certificate.identifiers != csr->names) return refuse("identifiers are not the CSR's names");
  return record;
}

}  // namespace ot::controld
