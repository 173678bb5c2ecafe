// The database schema, per SQL dialect, and the migration that applies it. No foreign keys,
// triggers or procedures, a primary key on every table (what Vitess-style MySQL services allow).
// Strings are utf8mb4 with binary collation on MySQL (IDs stay case-sensitive; SQLite compares
// bytes by default). The tunnel record is LONGTEXT, not JSON, so MySQL keeps its key order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"

namespace soci {
class session;
}

namespace ot::controld {

enum class SqlDialect { kSqlite, kMysql };

// Bumped only when a change needs a new schema; a database at a newer version is refused, so a
// rollback (an older controld) cannot write rows it does not understand.
// 1: the first schema. 2: usage_hourly.origin (usage per origin). 3: an origin in a tunnel record
// may carry a direct target (docs/pools-direct.md); no table changes, but a schema 2 controld
// would drop the targets whenever it rewrote a record, so it must not start on such a database.
inline constexpr int kSchemaVersion = 3;

// One object the schema needs: a table, or (SQLite) an index created beside it.
struct SchemaObject {
  std::string name;
  std::string ddl;  // CREATE ... IF NOT EXISTS
};

// In creation order (a table before its indexes).
[[nodiscard]] std::vector<SchemaObject> schemaObjects(SqlDialect dialect);

// What one migration found and did, for the startup log (and tests).
struct MigrationReport {
  int foundVersion = 0;              // recorded before this run; 0 when none was
  std::vector<std::string> created;  // objects whose CREATE ran, in order
  std::vector<std::string> altered;  // existing tables an older schema's layout was changed in
  bool recordedVersion = false;      // whether this run inserted kSchemaVersion
};

// Creates missing tables, brings tables of an older schema up to date (schema 2: usage_hourly's
// origin column, existing rows becoming origin ''; schema 3 changes no table), and records
// kSchemaVersion. Reads first: when
// every object exists and the version is current it runs nothing but two SELECTs, so a database
// whose DDL is locked down (safe migrations, a user without CREATE) keeps working. A database at a
// newer schema is refused with kInvalid before anything is changed. Concurrent migrations are safe.
// Throws what SOCI throws on database errors (the caller classifies them).
[[nodiscard]] Result<MigrationReport> migrateSchema(soci::session& sql, SqlDialect dialect,
                                                    int64_t nowMs);

// The highest recorded schema version; 0 when none is recorded or the table does not exist.
[[nodiscard]] int recordedSchemaVersion(soci::session& sql, SqlDialect dialect);

}  // namespace ot::controld
