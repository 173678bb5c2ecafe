// AdminService's Export and Import: the backup file streamed through the Backup interface
// (backup.h), which another part of controld implements. Both run on the gRPC handler's thread,
// which may block on storage as long as the file takes.
#include <string>
#include <utility>

#include "common/log.h"
#include "controld/admin/admin_service.h"

namespace ot::controld {
namespace {

const log::Logger& adminServiceBackupLogger() {
  static const log::Logger instance("controld.admin");
  return instance;
}

// Export chunks are gathered to about this size: the file's pieces come as storage pages them,
// and a message per record would cost more in framing than in data.
constexpr size_t kChunkBytes = 64 * 1024;

grpc::Status notBuilt() {
  return {grpc::StatusCode::UNIMPLEMENTED, "export/import not built"};
}

}  // namespace

grpc::Status AdminService::Export(grpc::ServerContext* context, const av1::ExportRequest* request,
                                  grpc::ServerWriter<av1::ExportChunk>* writer) {
  if (context_.backup == nullptr) return notBuilt();
  ExportOptions options;
  options.excludeDeleted = request->exclude_deleted();
  av1::ExportChunk pending;
  uint64_t records = 0;
  auto flush = [&]() {
    if (pending.data().empty() && pending.records() == 0) return true;
    const bool written = writer->Write(pending);
    pending.Clear();
    return written;
  };
  const Status exported =
      context_.backup->exportTo(options, [&](std::string_view bytes, uint32_t count) {
        if (context->IsCancelled()) return false;
        pending.mutable_data()->append(bytes);
        pending.set_records(pending.records() + count);
        records += count;
        if (pending.data().size() < kChunkBytes) return true;
        return flush();
      });
  if (!exported) {
    adminServiceBackupLogger().warn("export failed",
                                    {{"error", exported.error().message}, {"records", records}});
    return grpcStatus(exported.error());
  }
  if (!flush()) return {grpc::StatusCode::CANCELLED, "the reader went away"};
  adminServiceBackupLogger().info("export done", {{"records", records}});
  return grpc::Status::OK;
}

grpc::Status AdminService::Import(grpc::ServerContext*,
                                  grpc::ServerReader<av1::ImportChunk>* reader,
                                  av1::ImportResponse* response) {
  if (context_.backup == nullptr) return notBuilt();
  av1::ImportChunk chunk;
  // dry_run is read from the first chunk, before the import begins.
  const bool first = reader->Read(&chunk);
  ImportOptions options;
  options.dryRun = first && chunk.dry_run();
  std::unique_ptr<ImportSession> session = context_.backup->beginImport(options);
  if (session == nullptr) return {grpc::StatusCode::INTERNAL, "the import could not begin"};
  if (first) {
    do {
      const Status fed = session->feed(chunk.data());
      if (!fed) {
        adminServiceBackupLogger().warn(
            "import failed", {{"error", fed.error().message}, {"records", session->recordsSeen()}});
        return grpcStatus(fed.error());
      }
    } while (reader->Read(&chunk));
  }
  auto report = session->finish();
  if (!report) return grpcStatus(report.error());
  response->set_inserted(report->inserted);
  response->set_refreshed(report->refreshed);
  response->set_unchanged(report->unchanged);
  response->set_skipped(report->skipped);
  for (const RejectedImport& rejected : report->rejected) {
    av1::RejectedRecord* out = response->add_rejected();
    out->set_tunnel_id(rejected.tunnelId);
    out->set_reason(rejected.reason);
  }
  adminServiceBackupLogger().info("import done", {{"dry_run", options.dryRun},
                                                  {"inserted", report->inserted},
                                                  {"rejected", report->rejected.size()}});
  return grpc::Status::OK;
}

}  // namespace ot::controld
