// What an import accepts (docs/backup.md "What an import refuses"): only a record the server
// itself could have written for `domain`. Anything else is refused with a reason and never
// written, so a tampered or foreign backup cannot plant names, tokens or CSRs the server would
// then act on (the job runner checks CSRs again before every order; this keeps them out of the
// table in the first place). Pure: no I/O, no shared state; any thread.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"
#include "controld/admin/backup_file.h"
#include "controld/store/tunnel_record.h"

namespace ot::controld {

// The record of `row` when the server could have written it: the ID is one DNS label and the
// record's own; the record is exactly what toJson writes (known states, every field, the
// server's key order); the hostname is <id>.<domain>; the token hash is 64 lowercase hex
// (SHA-256); a CSR passes checkTunnelCsr for <id>.<domain>, its csrSha256 is the CSR's and the
// identifiers are its names; identifiers without a CSR are refused, and every identifier is
// <id>.<domain> or *.<id>.<domain>, once; the pool keeps checkPool's rules (origin names valid
// and unique, at most 32, stickyHoldMs in range). Otherwise kInvalid with the reason.
[[nodiscard]] Result<TunnelRecord> checkImportedRecord(const BackupRow& row,
                                                       std::string_view domain);

// 64 lowercase hex digits.
[[nodiscard]] bool isSha256Hex(std::string_view text);

}  // namespace ot::controld
