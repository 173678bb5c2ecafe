// Export and import (controld/admin/backup*.h, import_checks.h, sql_store_backup.cc): the file
// read back whole however it is split, malformed files refused, each hostile record refused with
// its reason, and the import rules (inserted, unchanged, refreshed, skipped, dry run) on SQLite and
// MariaDB (see test_database.h).
#include "controld/admin/backup.h"

#include <doctest/doctest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "controld/admin/backup_file.h"
#include "controld/admin/import_checks.h"
#include "controld/issuance/csr_check.h"
#include "tests/controld/csr_builder.h"
#include "tests/controld/test_database.h"

namespace ot::controld {
namespace {

using testing::testDatabases;

const std::string kDomain = "tunnel.test";

TunnelRecord validRecord(const std::string& id) {
  TunnelRecord record;
  record.id = id;
  record.hostname = id + "." + kDomain;
  record.tokenSha256Hex = std::string(64, 'a');
  record.createdAtMs = 1'700'000'000'000;
  return record;
}

// A record with a CSR for its own names, as bindCsr writes it.
TunnelRecord recordWithCsr(const std::string& id, bool wildcard) {
  TunnelRecord record = validRecord(id);
  const std::string pem = testing::buildCsrPem(testing::hostCsr(record.hostname, wildcard));
  auto csr = checkTunnelCsr(pem, id, kDomain);
  REQUIRE(csr.ok());
  record.certificate.id = "c0ffee";
  record.certificate.state = CertificateState::kIssuing;
  record.certificate.csrPem = pem;
  record.certificate.csrSha256 = csr->derSha256Hex;
  record.certificate.identifiers = csr->names;
  record.certificate.requestedAtMs = 1'700'000'000'001;
  return record;
}

BackupRow rowOf(const TunnelRecord& record, int64_t revision = 1) {
  return {record.id, toJson(record), revision};
}

std::string fileOf(const std::vector<BackupRow>& rows) {
  BackupWriter writer;
  std::string out = BackupWriter::begin();
  for (const auto& row : rows) writer.record(row, out);
  return out + BackupWriter::end();
}

std::vector<std::string> readInPieces(const std::string& file, size_t piece, Status& status) {
  BackupReader reader;
  std::vector<std::string> records;
  status = Ok{};
  for (size_t at = 0; at < file.size() && status.ok(); at += piece) {
    status = reader.feed(std::string_view(file).substr(at, piece), records);
  }
  if (status.ok()) status = reader.finish();
  return records;
}

TEST_CASE("backup file: what the writer writes reads back, split anywhere") {
  std::vector<BackupRow> rows;
  for (int i = 0; i < 5; ++i) {
    TunnelRecord record = validRecord("t" + std::to_string(i));
    // Strings holding the framing's own characters: braces, brackets, quotes, backslashes.
    record.certificate.error = "a \"quoted\" {brace} [bracket] \\ back\\slash } ]";
    // An odd number of quotes: a reader that missed escapes would end a string early.
    record.certificate.id = "one \" then } and ]";
    rows.push_back(rowOf(record, i + 1));
  }
  const std::string file = fileOf(rows);
  const nlohmann::json whole = nlohmann::json::parse(file);  // valid JSON as a whole
  CHECK(whole["records"].size() == rows.size());
  for (size_t piece : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{64}, file.size()}) {
    CAPTURE(piece);
    Status status = Ok{};
    const auto records = readInPieces(file, piece, status);
    REQUIRE(status.ok());
    REQUIRE(records.size() == rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const ParsedBackupRecord parsed = parseBackupRecord(records[i]);
      CHECK(parsed.error.empty());
      CHECK(parsed.row.id == rows[i].id);
      CHECK(parsed.row.revision == rows[i].revision);
      CHECK(parsed.row.recordJson == rows[i].recordJson);
    }
  }
  // Every split into two pieces.
  for (size_t cut = 0; cut <= file.size(); ++cut) {
    BackupReader reader;
    std::vector<std::string> records;
    REQUIRE(reader.feed(std::string_view(file).substr(0, cut), records).ok());
    REQUIRE(reader.feed(std::string_view(file).substr(cut), records).ok());
    REQUIRE(reader.finish().ok());
    REQUIRE(records.size() == rows.size());
  }
}

TEST_CASE("backup file: an empty backup and a pretty-printed one read") {
  Status status = Ok{};
  CHECK(readInPieces(fileOf({}), 3, status).empty());
  CHECK(status.ok());
  const std::string pretty = nlohmann::json::parse(fileOf({rowOf(validRecord("abc"))})).dump(2);
  const auto records = readInPieces(pretty, 5, status);
  CHECK(status.ok());
  REQUIRE(records.size() == 1);
  CHECK(parseBackupRecord(records[0]).row.id == "abc");
}

TEST_CASE("backup file: files that are not whole backups are refused") {
  const std::string good = fileOf({rowOf(validRecord("abc")), rowOf(validRecord("abd"))});
  struct Case {
    const char* name;
    std::string text;
  };
  const std::vector<Case> cases = {
      {"cut short in a record", good.substr(0, good.size() / 2)},
      {"cut short before the end", good.substr(0, good.find("\n]}"))},
      {"empty", ""},
      {"another key", R"({"tunnels":[]})"},
      {"not an object", "[]"},
      {"an element that is not an object", R"({"records":[1]})"},
      {"text after the end", good + "x"},
      {"a trailing comma", R"({"records":[{"id":"a"},]})"},
      {"a record over the cap",
       R"({"records":[{"id":")" + std::string(kMaxBackupRecordBytes, 'a') + R"("}]})"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    Status status = Ok{};
    (void)readInPieces(c.text, 4096, status);
    CHECK_FALSE(status.ok());
  }
}

TEST_CASE("import checks: the server's own records pass") {
  CHECK(checkImportedRecord(rowOf(validRecord("abc")), kDomain).ok());
  CHECK(checkImportedRecord(rowOf(recordWithCsr("abc", false)), kDomain).ok());
  CHECK(checkImportedRecord(rowOf(recordWithCsr("abc", true)), kDomain).ok());
  TunnelRecord deleted = validRecord("abc");
  deleted.deletedAtMs = 1'700'000'000'500;
  CHECK(checkImportedRecord(rowOf(deleted), kDomain).ok());
}

TEST_CASE("import checks: each record the server could not have written is refused") {
  const TunnelRecord base = recordWithCsr("abc", true);
  const std::string otherCsr = testing::buildCsrPem(testing::hostCsr("evil." + kDomain));
  const std::string apexCsr = testing::buildCsrPem(testing::hostCsr(kDomain, true));
  struct Case {
    const char* name;
    std::function<BackupRow()> make;
    const char* reason;
  };
  const auto mutated = [&](std::function<void(TunnelRecord&)> change) {
    return [&base, change] {
      TunnelRecord record = base;
      change(record);
      return rowOf(record);
    };
  };
  const std::vector<Case> cases = {
      {"ID not a label", mutated([](TunnelRecord& r) { r.id = "a.b"; }), "DNS label"},
      {"ID with uppercase", mutated([](TunnelRecord& r) { r.id = "ABC"; }), "DNS label"},
      {"line ID differs",
       [&] {
         BackupRow row = rowOf(base);
         row.id = "abd";
         return row;
       },
       "not the line's id"},
      {"hostname of another domain",
       mutated([](TunnelRecord& r) { r.hostname = "abc.example.com"; }), "<id>.<domain>"},
      {"hostname the apex", mutated([](TunnelRecord& r) { r.hostname = kDomain; }),
       "<id>.<domain>"},
      {"hostname of another tunnel",
       mutated([](TunnelRecord& r) { r.hostname = "abd." + kDomain; }), "<id>.<domain>"},
      {"token in the clear", mutated([](TunnelRecord& r) { r.tokenSha256Hex = "secret"; }),
       "SHA-256"},
      {"token hash uppercase",
       mutated([](TunnelRecord& r) { r.tokenSha256Hex = std::string(64, 'A'); }), "SHA-256"},
      {"token hash too long",
       mutated([](TunnelRecord& r) { r.tokenSha256Hex = std::string(65, 'a'); }), "SHA-256"},
      {"CSR for another name", mutated([&](TunnelRecord& r) { r.certificate.csrPem = otherCsr; }),
       "CSR refused"},
      {"CSR for the apex", mutated([&](TunnelRecord& r) { r.certificate.csrPem = apexCsr; }),
       "CSR refused"},
      {"CSR garbage", mutated([](TunnelRecord& r) { r.certificate.csrPem = "hello"; }),
       "CSR refused"},
      {"csrSha256 of something else",
       mutated([](TunnelRecord& r) { r.certificate.csrSha256 = std::string(64, 'b'); }),
       "csrSha256"},
      {"identifier for another name",
       mutated([](TunnelRecord& r) { r.certificate.identifiers = {"evil." + kDomain}; }),
       "identifier"},
      {"identifier the apex wildcard",
       mutated([](TunnelRecord& r) { r.certificate.identifiers = {"*." + kDomain}; }),
       "identifier"},
      {"identifier twice", mutated([](TunnelRecord& r) {
         r.certificate.identifiers = {r.hostname, r.hostname};
       }),
       "twice"},
      {"identifiers not the CSR's",
       mutated([](TunnelRecord& r) { r.certificate.identifiers = {r.hostname}; }), "CSR's names"},
      {"identifiers without a CSR", mutated([](TunnelRecord& r) {
         r.certificate.csrPem.clear();
         r.certificate.csrSha256.clear();
       }),
       "without a CSR"},
      {"unknown state",
       [&] {
         BackupRow row = rowOf(base);
         const auto at = row.recordJson.find("\"issuing\"");
         row.recordJson.replace(at, 9, "\"pwned\"");
         return row;
       },
       "unreadable"},
      {"an extra key",
       [&] {
         BackupRow row = rowOf(base);
         row.recordJson.insert(row.recordJson.size() - 1, ",\"admin\":true");
         return row;
       },
       "server's form"},
      {"not JSON",
       [&] {
         BackupRow row = rowOf(base);
         row.recordJson = "{nope";
         return row;
       },
       "unreadable"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    auto checked = checkImportedRecord(c.make(), kDomain);
    REQUIRE_FALSE(checked.ok());
    CHECK(checked.error().message.find(c.reason) != std::string::npos);
  }
}

TEST_CASE("backup file: malformed records are named, not fatal") {
  CHECK(parseBackupRecord("{nope").error == "unparseable JSON");
  CHECK(parseBackupRecord(R"({"revision":1,"record":{}})").error == "no string id");
  const ParsedBackupRecord noRecord = parseBackupRecord(R"({"id":"abc","revision":1})");
  CHECK(noRecord.error == "no record object");
  CHECK(noRecord.row.id == "abc");
  CHECK(parseBackupRecord(R"({"id":"abc","revision":0,"record":{}})").error ==
        "no positive integer revision");
}

// Feeds `file` to a new import in pieces of `piece` bytes.
Result<ImportReport> importFile(Backup& backup, const std::string& file, bool dryRun = false,
                                size_t piece = 1000) {
  auto session = backup.beginImport({.dryRun = dryRun});
  for (size_t at = 0; at < file.size(); at += piece) {
    if (Status fed = session->feed(std::string_view(file).substr(at, piece)); !fed) {
      return fed.error();
    }
  }
  return session->finish();
}

std::string exportAll(Backup& backup) {
  std::string out;
  const Status exported = backup.exportTo({}, [&](std::string_view bytes, uint32_t) {
    out += bytes;
    return true;
  });
  REQUIRE(exported.ok());
  return out;
}

TEST_CASE("backup: inserted, unchanged, refreshed and skipped, on every backend") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    auto backup = makeBackup(*store, kDomain);
    // "own" was created by the server: an import never overwrites it.
    REQUIRE(store->insertTunnel(validRecord("own")).ok());

    TunnelRecord a = validRecord("aaa");
    TunnelRecord b = recordWithCsr("bbb", true);
    TunnelRecord own = validRecord("own");
    own.createdAtMs += 1;
    const std::string first = fileOf({rowOf(a, 7), rowOf(b, 3), rowOf(own, 1)});

    auto dry = importFile(*backup, first, /*dryRun=*/true);
    REQUIRE(dry.ok());
    CHECK(dry->inserted == 2);
    CHECK(dry->skipped == 1);
    CHECK_FALSE(store->getTunnel("aaa")->has_value());  // nothing written

    auto report = importFile(*backup, first);
    REQUIRE(report.ok());
    CHECK(report->inserted == 2);
    CHECK(report->skipped == 1);
    CHECK(report->rejected.empty());
    auto storedA = store->getTunnel("aaa");
    REQUIRE(storedA->has_value());
    CHECK((*storedA)->record == a);
    CHECK((*storedA)->revision == 7);  // the file's revision, kept
    CHECK(store->getTunnel("own").value()->record == validRecord("own"));

    // The same file again: nothing to do.
    report = importFile(*backup, first, false, 7);
    REQUIRE(report.ok());
    CHECK(report->unchanged == 2);
    CHECK(report->skipped == 1);

    // A newer backup: rows still as imported are refreshed (their revision bumped, so a
    // cached copy's next write fails and reloads); a row the server changed since is skipped.
    TunnelRecord bServer = (*store->getTunnel("bbb"))->record;
    bServer.lastConnectedAtMs = 1'700'000'100'000;
    REQUIRE(store->updateTunnel(bServer, 3).ok());
    a.lastConnectedAtMs = 1'700'000'200'000;
    b.lastConnectedAtMs = 1'700'000'300'000;
    report = importFile(*backup, fileOf({rowOf(a, 9), rowOf(b, 3)}));
    REQUIRE(report.ok());
    CHECK(report->refreshed == 1);
    CHECK(report->skipped == 1);
    storedA = store->getTunnel("aaa");
    CHECK((*storedA)->record == a);
    CHECK((*storedA)->revision == 8);
    CHECK(store->updateTunnel(a, 7).error().kind == ErrorKind::kConflict);
    CHECK((*store->getTunnel("bbb"))->record == bServer);

    // Export: every row in the server's form, readable by the reader, importable again.
    const std::string exported = exportAll(*backup);
    Status status = Ok{};
    const auto records = readInPieces(exported, 13, status);
    REQUIRE(status.ok());
    CHECK(records.size() == 3);
    report = importFile(*backup, exported);
    REQUIRE(report.ok());
    CHECK(report->unchanged == 3);
  }
}

TEST_CASE("backup: an import lists hostile records and writes none of them") {
  for (const auto& db : testDatabases()) {
    CAPTURE(db->name());
    auto store = db->openMigrated();
    auto backup = makeBackup(*store, kDomain);
    TunnelRecord evil = validRecord("evil");
    evil.hostname = "www.example.com";
    BackupRow notLabel = rowOf(validRecord("x"));
    notLabel.id = "x.y";
    BackupRow longId = rowOf(validRecord("y"));
    longId.id = std::string(100'000, 'z');
    std::string file = fileOf({rowOf(validRecord("good")), rowOf(evil), notLabel, longId});
    file.insert(file.find("\n]}"), ",\n{\"id\":\"junk\",\"revision\":1,\"record\":[]}");
    auto report = importFile(*backup, file);
    REQUIRE(report.ok());
    CHECK(report->inserted == 1);
    REQUIRE(report->rejected.size() == 4);
    CHECK(report->rejected[0].tunnelId == "evil");
    CHECK(report->rejected[1].tunnelId == "x.y");
    CHECK(report->rejected[2].tunnelId == std::string(100, 'z') + "...");  // shortened
    CHECK(report->rejected[3].tunnelId == "junk");
    CHECK_FALSE(store->getTunnel("evil")->has_value());
    CHECK_FALSE(store->getTunnel("junk")->has_value());
    const std::string json = importReportJson(*report);
    CHECK(json.find("\"reason\":\"hostname is not <id>.<domain>\"") != std::string::npos);
  }
}

TEST_CASE("backup: an export whose reader goes away stops without ending the file") {
  auto db = testing::TestDatabase::sqlite();
  auto store = db->openMigrated();
  for (int i = 0; i < kBackupBatch + 10; ++i) {
    REQUIRE(store->insertTunnel(validRecord("t" + std::to_string(i))).ok());
  }
  auto backup = makeBackup(*store, kDomain);
  std::string out;
  int calls = 0;
  const Status exported = backup->exportTo({}, [&](std::string_view bytes, uint32_t) {
    if (++calls == 3) return false;  // the opening, one page, then gone
    out += bytes;
    return true;
  });
  CHECK_FALSE(exported.ok());
  CHECK(out.find("]}") == std::string::npos);
  Status status = Ok{};
  CHECK(readInPieces(out, 100, status).size() == static_cast<size_t>(kBackupBatch));
  CHECK_FALSE(status.ok());  // cut short, never a valid file

  // Whole: pages of 500 joined into one file with every row once.
  const std::string whole = exportAll(*backup);
  CHECK(readInPieces(whole, 4096, status).size() == static_cast<size_t>(kBackupBatch + 10));
  CHECK(status.ok());
}

}  // namespace
}  // namespace ot::controld
