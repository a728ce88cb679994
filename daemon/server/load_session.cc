#include "daemon/server/load_session.h"

#include <atomic>
#include <cstring>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "proto/lib/status_context.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/coordinator/save_planner.h"
#include "daemon/server/chunk_reader.h"
#include "proto/lib/region_convert.h"

namespace ckpt::server {
namespace {

using coordinator::AlignUp;

}  // namespace

LoadSession::LoadSession(NodeContext& context, std::string job, int64_t step, int world_size)
    : context_(context), job_(std::move(job)), step_(step), world_size_(world_size) {
  absl::MutexLock lock(&mu_);
  ranks_.resize(world_size);
  deadline_ = absl::Now() + context_.options.plan_timeout;
}

absl::StatusOr<v1::LoadResponse> LoadSession::Load(const RankSession& rank,
                                                   const v1::LoadRequest& request) {
  bool last = false;
  {
    absl::MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    if (rank.world_size != world_size_) {
      return absl::InvalidArgumentError(absl::StrCat("load of job ", job_, ": rank ", rank.rank,
                                                     " has world size ", rank.world_size,
                                                     ", the load has ", world_size_));
    }
    RankState& state = ranks_[rank.rank];
    if (state.request.has_value()) {
      return absl::FailedPreconditionError(absl::StrCat("load of job ", job_, ": rank ",
                                                        rank.rank, " asked twice"));
    }
    state.request = request;
    state.session_id = rank.id;
    last = ++arrived_ == world_size_;
    if (last) running_ = true;
  }
  if (last) {
    absl::Status status = Execute();
    absl::MutexLock lock(&mu_);
    running_ = false;
    if (!status.ok() && error_.ok()) error_ = status;
    done_ = true;
  }
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&done_));
  if (!error_.ok()) return error_;
  return ranks_[rank.rank].response;
}

absl::Status LoadSession::Execute() {
  const std::string what = absl::StrCat("load of job ", job_, " step ",
                                        step_ < 0 ? std::string("latest") : absl::StrCat(step_), ": ");
  v1::NodeLoadPlan plan;
  std::vector<std::string> session_ids(world_size_);
  {
    absl::MutexLock lock(&mu_);
    *plan.mutable_host() = context_.host;
    plan.set_job(job_);
    plan.set_step(step_);
    for (int r = 0; r < world_size_; ++r) {
      v1::NodeLoadPlan::RankRequests* rank = plan.add_ranks();
      rank->set_rank(r);
      *rank->mutable_tensors() = ranks_[r].request->tensors();
      *rank->mutable_object_keys() = ranks_[r].request->object_keys();
      session_ids[r] = ranks_[r].session_id;
    }
  }
  absl::StatusOr<v1::LoadAssignment> assignment = context_.coordinator.PlanLoad(plan);
  if (!assignment.ok()) return Prefixed(assignment.status(), what);

  // Lay each rank's results out in its lease: tensors, then objects, each
  // at an aligned offset so chunks can be read straight into them.
  const uint64_t alignment = context_.pool.alignment();
  std::vector<v1::LoadResponse> responses(world_size_);
  std::vector<std::vector<uint64_t>> tensor_offset(world_size_);
  std::vector<std::vector<uint64_t>> object_offset(world_size_);
  std::vector<uint64_t> lease_bytes(world_size_, 0);
  for (const v1::LoadAssignment::RankSizes& sizes : assignment->sizes()) {
    const int r = sizes.rank();
    uint64_t offset = 0;
    for (uint64_t bytes : sizes.tensor_bytes()) {
      tensor_offset[r].push_back(offset);
      v1::MemoryRef* ref = responses[r].add_tensors();
      ref->set_offset(offset);
      ref->set_length(bytes);
      offset += AlignUp(bytes, alignment);
    }
    for (uint64_t bytes : sizes.object_bytes()) {
      object_offset[r].push_back(offset);
      v1::MemoryRef* ref = responses[r].add_objects();
      ref->set_offset(offset);
      ref->set_length(bytes);
      offset += AlignUp(bytes, alignment);
    }
    lease_bytes[r] = offset;
  }
  std::vector<char*> lease_base(world_size_, nullptr);
  std::vector<std::pair<int, uint64_t>> granted;  // (rank, lease id)
  absl::Status status;
  const absl::Time pool_deadline = absl::Now() + context_.options.pool_wait_timeout;
  for (int r = 0; r < world_size_ && status.ok(); ++r) {
    responses[r].set_step(assignment->step());
    if (lease_bytes[r] == 0) continue;
    absl::StatusOr<pool::Allocation> lease = context_.pool.Allocate(lease_bytes[r], pool_deadline);
    if (!lease.ok()) {
      status = Prefixed(lease.status(), absl::StrCat(what, "lease for rank ", r, ": "));
      break;
    }
    absl::StatusOr<uint64_t> id = context_.sessions.AddLease(session_ids[r], *lease);
    if (!id.ok()) {
      status = Prefixed(id.status(), absl::StrCat(what, "rank ", r, ": "));
      break;
    }
    granted.emplace_back(r, *id);
    lease_base[r] = context_.pool.base() + lease->offset;
    responses[r].mutable_lease()->set_id(*id);
    responses[r].mutable_lease()->set_offset(lease->offset);
    responses[r].mutable_lease()->set_length(lease->length);
  }
  if (status.ok()) status = Prefixed(RunReads(*assignment, lease_base, tensor_offset, object_offset), what);
  if (status.ok()) status = Prefixed(DeliverToDevices(plan, session_ids, lease_base, tensor_offset), what);
  if (!status.ok()) {
    for (const auto& [r, id] : granted) (void)context_.sessions.ReleaseLease(session_ids[r], id);
    return status;
  }
  absl::MutexLock lock(&mu_);
  for (int r = 0; r < world_size_; ++r) ranks_[r].response = std::move(responses[r]);
  return absl::OkStatus();
}

absl::Status LoadSession::RunReads(const v1::LoadAssignment& assignment,
                                   const std::vector<char*>& lease_base,
                                   const std::vector<std::vector<uint64_t>>& tensor_offset,
                                   const std::vector<std::vector<uint64_t>>& object_offset) {
  // A global object several ranks want is one stored chunk: read it once.
  std::map<std::pair<std::string, uint64_t>, std::vector<const v1::ObjectRead*>> object_groups;
  for (const v1::ObjectRead& read : assignment.objects()) {
    object_groups[{read.chunk().file(), read.chunk().file_offset()}].push_back(&read);
  }
  std::vector<const std::vector<const v1::ObjectRead*>*> objects;
  for (const auto& [key, group] : object_groups) objects.push_back(&group);
  const size_t total = assignment.reads_size() + objects.size();
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  absl::Mutex error_mu;
  absl::Status first_error;
  const uint64_t alignment = context_.pool.alignment();
  auto worker = [&] {
    ChunkReader reader(context_.backend, assignment.checkpoint_path(), alignment);
    for (size_t i = next++; i < total && !failed.load(); i = next++) {
      absl::Status s;
      if (i < static_cast<size_t>(assignment.reads_size())) {
        const v1::ChunkRead& read = assignment.reads(i);
        absl::StatusOr<pool::Allocation> scratch = context_.pool.Allocate(
            read.chunk().length(), absl::Now() + context_.options.pool_wait_timeout);
        if (!scratch.ok()) {
          s = scratch.status();
        } else {
          char* data = context_.pool.base() + scratch->offset;
          s = reader.Read(read.chunk(), absl::StrCat("tensor ", read.fqn()), data);
          if (s.ok()) {
            for (const v1::CopyRun& run : read.runs()) {
              std::memcpy(lease_base[run.rank()] + tensor_offset[run.rank()][run.request()] +
                              run.dest_offset(),
                          data + run.chunk_offset(), run.length());
            }
          }
          context_.pool.Free(*scratch);
        }
      } else {
        // Objects go straight into the first wanting rank's slot of its lease.
        const std::vector<const v1::ObjectRead*>& group = *objects[i - assignment.reads_size()];
        const v1::ObjectRead& first = *group.front();
        char* dst = lease_base[first.rank()] + object_offset[first.rank()][first.request()];
        s = reader.Read(first.chunk(), absl::StrCat("object ", first.key()), dst);
        for (size_t k = 1; s.ok() && k < group.size(); ++k) {
          std::memcpy(lease_base[group[k]->rank()] +
                          object_offset[group[k]->rank()][group[k]->request()],
                      dst, first.chunk().length());
        }
      }
      if (!s.ok()) {
        absl::MutexLock lock(&error_mu);
        if (first_error.ok()) first_error = s;
        failed = true;
      }
    }
    context_.bytes_read.fetch_add(reader.bytes_read(), std::memory_order_relaxed);
  };
  const int threads = std::max(1, std::min<int>(context_.options.reader_threads,
                                                static_cast<int>(total)));
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  absl::MutexLock lock(&error_mu);
  return first_error;
}

absl::Status LoadSession::DeliverToDevices(const v1::NodeLoadPlan& plan,
                                           const std::vector<std::string>& session_ids,
                                           const std::vector<char*>& lease_base,
                                           const std::vector<std::vector<uint64_t>>& tensor_offset) {
  for (const v1::NodeLoadPlan::RankRequests& rank : plan.ranks()) {
    for (int i = 0; i < rank.tensors_size(); ++i) {
      const v1::TensorShard& request = rank.tensors(i);
      if (!request.has_device_buffer()) continue;
      const v1::DeviceBuffer& target = request.device_buffer();
      if (!context_.gpu.HasDevice()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "tensor ", request.fqn(), " of rank ", rank.rank(), " is on a GPU but ckptd has ",
            context_.gpu.Describe(), "; use the push path or host tensors"));
      }
      absl::StatusOr<std::shared_ptr<gpu::IpcMapping>> mapping = context_.ipc.Get(
          session_ids[rank.rank()], target.ipc_handle(), target.device(), target.allocation_bytes());
      if (!mapping.ok()) return mapping.status();
      absl::StatusOr<ShardGeometry> g = ValidateShard(request);
      if (!g.ok()) return g.status();
      const uint64_t bytes = static_cast<uint64_t>(g->bytes);
      if (target.offset() > (*mapping)->bytes() || bytes > (*mapping)->bytes() - target.offset()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", request.fqn(), ": device buffer [", target.offset(), ", +", bytes,
            ") lies outside its allocation of ", (*mapping)->bytes(), " bytes"));
      }
      // Host to device on the daemon's streams; the rank copies nothing.
      char* device = static_cast<char*>((*mapping)->device_ptr()) + target.offset();
      if (absl::Status s = context_.gpu.CopyHostToDevice(
              lease_base[rank.rank()] + tensor_offset[rank.rank()][i], device, bytes);
          !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("tensor ", request.fqn(), ": ", s.message()));
      }
    }
  }
  return absl::OkStatus();
}

void LoadSession::CheckDeadlines(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (done_ || running_ || now < deadline_) return;
  std::vector<int> missing;
  for (int r = 0; r < world_size_; ++r) {
    if (!ranks_[r].request.has_value()) missing.push_back(r);
  }
  error_ = absl::DeadlineExceededError(absl::StrCat(
      "load of job ", job_, ": ranks [", absl::StrJoin(missing, ", "), "] did not ask within ",
      absl::FormatDuration(context_.options.plan_timeout), "; aborted"));
  done_ = true;
}

bool LoadSession::finished() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

}  // namespace ckpt::server
