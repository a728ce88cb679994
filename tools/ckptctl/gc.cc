#include "tools/ckptctl/gc.h"

#include <algorithm>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ckpt::ctl {

int RunGc(const Call& call, const GcOptions& o) {
  v1::CollectGarbageRequest request;
  request.set_job(o.job);
  request.set_keep_last(o.keep_last);
  request.set_keep_every(o.keep_every);
  request.set_dry_run(o.dry_run);
  request.set_delete_broken(o.delete_broken);
  if (o.grace_s.has_value()) request.set_grace_s(*o.grace_s);
  v1::CollectGarbageResponse response;
  const grpc::Status rpc = InvokeRpc(call, [&](grpc::ClientContext* context) {
    return call.stub->CollectGarbage(context, request, &response);
  });
  if (!rpc.ok()) return FailedRpc(call, "gc", rpc);

  std::ostream& out = *call.out;
  const char* deleted_word = response.dry_run() ? "would delete" : "deleted";
  int deleted = 0, failed = 0;
  for (const v1::GcStepReport& step : response.steps()) {
    std::string reason = step.reason();
    std::replace(reason.begin(), reason.end(), '\n', ' ');  // it may quote a file's error
    switch (step.outcome()) {
      case v1::GcStepReport::DELETED:
        ++deleted;
        out << absl::StrFormat("step %d: %s (%s), %s\n", step.step(), deleted_word, reason,
                               FormatBytes(step.bytes()));
        break;
      case v1::GcStepReport::FAILED:
        ++failed;
        out << absl::StrFormat("step %d: FAILED to delete: %s\n", step.step(), reason);
        break;
      default:
        out << absl::StrFormat("step %d: kept (%s)\n", step.step(), reason);
        break;
    }
  }
  out << absl::StrFormat("%s%s %d of %d steps of job %s, %s (%d bytes) %s\n",
                         response.dry_run() ? "dry run: " : "", deleted_word, deleted,
                         response.steps_size(), o.job, FormatBytes(response.bytes_freed()),
                         response.bytes_freed(), response.dry_run() ? "to free" : "freed");
  if (failed > 0) {
    *call.err << "ckptctl: gc: " << failed << " steps of job " << o.job
              << " could not be deleted (see above)\n";
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace ckpt::ctl
