// otctl export FILE and import FILE: the backup file streamed to and from controld, with progress
// (records, bytes) on stderr. The export is written to FILE.partial and renamed once the stream
// ended well, so FILE is never a cut-short export.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <system_error>

#include "otctl/commands.h"
#include "otctl/exit_codes.h"
#include "otctl/output.h"

namespace ot::otctl {
namespace {

constexpr size_t kImportChunk = 64 * 1024;

void progress(const char* what, uint64_t records, uint64_t bytes, bool last) {
  std::fprintf(stderr, "\r%s: %llu records, %llu bytes%s", what,
               static_cast<unsigned long long>(records), static_cast<unsigned long long>(bytes),
               last ? "\n" : "");
}

int exportFile(Client& client, const std::string& path, bool excludeDeleted) {
  const std::string partial = path + ".partial";
  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  if (!out) {
    std::fprintf(stderr, "otctl: cannot write %s\n", partial.c_str());
    return kExitFailed;
  }
  av1::ExportRequest request;
  request.set_exclude_deleted(excludeDeleted);
  auto context = client.context(false);
  auto reader = client.stub().Export(context.get(), request);
  av1::ExportChunk chunk;
  uint64_t records = 0;
  uint64_t bytes = 0;
  bool written = true;
  while (reader->Read(&chunk)) {
    out.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
    if (!out) {
      written = false;
      context->TryCancel();
      break;
    }
    records += chunk.records();
    bytes += chunk.data().size();
    progress("export", records, bytes, false);
  }
  const grpc::Status status = reader->Finish();
  out.close();
  progress("export", records, bytes, true);
  std::error_code ignored;
  if (!written || !out) {
    std::filesystem::remove(partial, ignored);
    std::fprintf(stderr, "otctl: export: cannot write %s\n", partial.c_str());
    return kExitFailed;
  }
  if (!status.ok()) {
    std::filesystem::remove(partial, ignored);
    return client.fail("export", status);
  }
  std::error_code renamed;
  std::filesystem::rename(partial, path, renamed);
  if (renamed) {
    std::fprintf(stderr, "otctl: export: cannot rename %s: %s\n", partial.c_str(),
                 renamed.message().c_str());
    return kExitFailed;
  }
  if (client.options().json) {
    std::printf("{\"records\":%llu,\"bytes\":%llu}\n", static_cast<unsigned long long>(records),
                static_cast<unsigned long long>(bytes));
  }
  return kExitOk;
}

int importFile(Client& client, const std::string& path, bool dryRun) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "otctl: cannot read %s\n", path.c_str());
    return kExitFailed;
  }
  auto context = client.context(false);
  av1::ImportResponse response;
  auto writer = client.stub().Import(context.get(), &response);
  std::string buffer(kImportChunk, '\0');
  uint64_t bytes = 0;
  bool first = true;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<size_t>(in.gcount());
    if (got == 0 && !first) break;
    av1::ImportChunk chunk;
    chunk.set_data(buffer.data(), got);
    if (first) chunk.set_dry_run(dryRun);
    first = false;
    if (!writer->Write(chunk)) break;  // controld ended the call: Finish says why
    bytes += got;
    progress("import", 0, bytes, false);
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  std::fprintf(stderr, "\rimport: %llu bytes sent\n", static_cast<unsigned long long>(bytes));
  if (!status.ok()) return client.fail("import", status);
  if (client.options().json) {
    std::printf("%s\n", toJson(response).c_str());
  } else {
    std::printf("%s%llu inserted, %llu refreshed, %llu unchanged, %llu skipped, %d rejected\n",
                dryRun ? "dry run: " : "", static_cast<unsigned long long>(response.inserted()),
                static_cast<unsigned long long>(response.refreshed()),
                static_cast<unsigned long long>(response.unchanged()),
                static_cast<unsigned long long>(response.skipped()), response.rejected_size());
    if (response.rejected_size() > 0) {
      Table table({{"REJECTED", 14}, {"REASON", 0}});
      for (const av1::RejectedRecord& rejected : response.rejected()) {
        table.row({rejected.tunnel_id().empty() ? "-" : rejected.tunnel_id(), rejected.reason()});
      }
    }
  }
  // Rejected records were not imported: the operation did not do all it was asked.
  return response.rejected_size() > 0 ? kExitFailed : kExitOk;
}

}  // namespace

void addBackupCommands(CLI::App& app, Action& action) {
  auto path = std::make_shared<std::string>();
  auto excludeDeleted = std::make_shared<bool>(false);
  CLI::App* exportCommand = app.add_subcommand("export", "write the backup file (every tunnel)");
  exportCommand->add_option("file", *path, "where to write it")->required();
  exportCommand->add_flag("--exclude-deleted", *excludeDeleted, "leave deleted tunnels out");
  exportCommand->callback([&action, path, excludeDeleted] {
    action = [path, excludeDeleted](Client& client) {
      return exportFile(client, *path, *excludeDeleted);
    };
  });
  auto dryRun = std::make_shared<bool>(false);
  CLI::App* importCommand = app.add_subcommand("import", "load a backup file into storage");
  importCommand->add_option("file", *path, "the export file")->required();
  importCommand->add_flag("--dry-run", *dryRun, "check every record, write nothing");
  importCommand->callback([&action, path, dryRun] {
    action = [path, dryRun](Client& client) { return importFile(client, *path, *dryRun); };
  });
}

}  // namespace ot::otctl
