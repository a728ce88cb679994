#include "daemon/tier/erasure_transfer.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "daemon/exec/stream_tasks.h"
#include "daemon/peer/peer_sender.h"
#include "daemon/peer/peer_wire.h"
#include "daemon/tier/erasure_code.h"

namespace ckpt::tier {
namespace {

peer::PeerToken PieceToken(uint64_t id, const std::string& secret, uint32_t stripe, uint64_t piece,
                           uint32_t from, uint32_t to) {
  return peer::TransferToken(id, (stripe << 20) | static_cast<uint32_t>(piece),
                             static_cast<uint16_t>(from), static_cast<uint16_t>(to), secret);
}

// A share's bytes: a range of its files laid end to end.
class ShareReader {
 public:
  ShareReader(storage::Backend& backend, std::string dir, const v1::ErasureShare& share)
      : backend_(backend), dir_(std::move(dir)), share_(share) {}

  // [at, at + length) of the share.
  absl::Status Read(uint64_t at, char* dst, uint64_t length) {
    uint64_t pos = share_.offset() + at;
    uint64_t start = 0;
    for (int i = 0; i < share_.files_size() && length > 0; ++i) {
      const v1::ReplicaFile& f = share_.files(i);
      const uint64_t end = start + f.bytes();
      if (pos < end) {
        const uint64_t n = std::min(length, end - pos);
        if (open_.size() <= static_cast<size_t>(i)) open_.resize(i + 1);
        if (open_[i] == nullptr) {
          absl::StatusOr<std::unique_ptr<storage::ReadableFile>> file =
              backend_.NewReadableFile(absl::StrCat(dir_, "/", f.name()));
          if (!file.ok()) return file.status();
          open_[i] = std::move(*file);
        }
        absl::StatusOr<size_t> got = open_[i]->ReadAt(pos - start, dst, n);
        if (!got.ok()) return got.status();
        if (*got != n) {
          return absl::DataLossError(absl::StrCat(dir_, "/", f.name(), " is shorter than its ",
                                                  f.bytes(), " bytes planned"));
        }
        dst += n;
        pos += n;
        length -= n;
      }
      start = end;
    }
    if (length > 0) return absl::InternalError("a share reaches past its files");
    return absl::OkStatus();
  }

 private:
  storage::Backend& backend_;
  const std::string dir_;
  const v1::ErasureShare& share_;
  std::vector<std::unique_ptr<storage::ReadableFile>> open_;
};

// The files rebuilt shares are written into, opened once (opening truncates)
// and shared by the stripes' threads.
class RebuiltFiles {
 public:
  RebuiltFiles(storage::Backend& backend, std::string dir)
      : backend_(backend), dir_(std::move(dir)) {}

  absl::Status Create(const v1::ErasureShare& share) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    for (const v1::ReplicaFile& f : share.files()) {
      if (files_.count(f.name()) > 0) continue;
      const std::string path = absl::StrCat(dir_, "/", f.name());
      if (absl::Status s = backend_.CreateDirs(path.substr(0, path.rfind('/'))); !s.ok()) return s;
      absl::StatusOr<std::unique_ptr<storage::WritableFile>> file = backend_.NewWritableFile(path);
      if (!file.ok()) return file.status();
      files_[f.name()] = std::move(*file);
    }
    return absl::OkStatus();
  }

  // [at, at + length) of the share.
  absl::Status Write(const v1::ErasureShare& share, uint64_t at, const char* src, uint64_t length)
      ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    uint64_t pos = share.offset() + at;
    uint64_t start = 0;
    for (const v1::ReplicaFile& f : share.files()) {
      const uint64_t end = start + f.bytes();
      if (pos < end && length > 0) {
        const uint64_t n = std::min(length, end - pos);
        if (absl::Status s = files_.at(f.name())->WriteAt(pos - start, src, n); !s.ok()) return s;
        src += n;
        pos += n;
        length -= n;
      }
      start = end;
    }
    return absl::OkStatus();
  }

  absl::Status Close() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    absl::Status status;
    for (auto& [name, file] : files_) {
      if (status.ok()) status = file->Sync();
      absl::Status closed = file->Close();
      if (status.ok()) status = closed;
    }
    return status;
  }

 private:
  storage::Backend& backend_;
  const std::string dir_;
  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<storage::WritableFile>> files_ ABSL_GUARDED_BY(mu_);
};

// Sends share `share` of `stripe` in pieces to `address`; *sent counts.
absl::Status SendShare(storage::Backend& backend, const std::string& dir,
                       const v1::ErasureStripe& stripe, uint32_t share, uint64_t piece_bytes,
                       const std::string& address,
                       const std::function<peer::PeerToken(uint64_t)>& token,
                       const std::function<bool()>& stop, std::atomic<uint64_t>* sent) {
  const v1::ErasureShare& from = stripe.shares(share);
  ShareReader reader(backend, dir, from);
  std::unique_ptr<char[]> buffer(new char[piece_bytes]);
  peer::PeerSendOptions options;
  options.cancelled = stop;
  for (uint64_t q = 0; q * piece_bytes < from.bytes(); ++q) {
    if (stop()) return absl::CancelledError("stopped");
    const uint64_t length = std::min(piece_bytes, from.bytes() - q * piece_bytes);
    if (absl::Status s = reader.Read(q * piece_bytes, buffer.get(), length); !s.ok()) return s;
    const peer::PeerBlockRef block{0, buffer.get(), length};
    absl::Status s = peer::PeerSend(address, token(q), {&block, 1}, options);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("share ", share, " of stripe ", stripe.number(),
                                                 ": ", s.message()));
    }
    sent->fetch_add(length, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

// Receives piece q of each share in `sources` into buffers[share] (each
// padded with zeros to `length`).
absl::Status ReceivePiece(peer::PeerReceiver& receiver, const v1::ErasureStripe& stripe,
                          const std::vector<uint32_t>& sources, uint64_t q, uint64_t piece_bytes,
                          uint64_t length, const std::vector<std::unique_ptr<uint8_t[]>>& buffers,
                          const std::function<peer::PeerToken(uint32_t, uint64_t)>& token,
                          const std::function<bool()>& stop, absl::Time deadline) {
  std::vector<peer::ExpectedTransfer> expected;
  for (uint32_t i : sources) {
    const uint64_t bytes = stripe.shares(i).bytes();
    const uint64_t at = q * piece_bytes;
    const uint64_t n = bytes > at ? std::min(length, bytes - at) : 0;
    char* dst = reinterpret_cast<char*>(buffers[i].get());
    std::memset(dst + n, 0, length - n);
    if (n == 0) continue;
    expected.emplace_back(receiver.Expect(absl::StrCat("share ", i, " of stripe ", stripe.number(),
                                                       " from host ", stripe.shares(i).host()),
                                          dst, n, token(i, q)));
  }
  for (peer::ExpectedTransfer& t : expected) {
    // A failure elsewhere stops the wait.
    if (absl::Status s = t->WaitUnless(deadline, stop); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::vector<std::unique_ptr<uint8_t[]>> Buffers(size_t count, uint64_t bytes) {
  std::vector<std::unique_ptr<uint8_t[]>> buffers;
  for (size_t i = 0; i < count; ++i) buffers.emplace_back(new uint8_t[bytes]);
  return buffers;
}

}  // namespace

absl::Status ExchangeStripes(peer::PeerReceiver* receiver, storage::Backend& backend,
                             const std::string& dir, const v1::ErasurePlan& plan,
                             const std::string& host, const std::function<bool()>& cancelled,
                             absl::Time deadline, uint64_t* sent) {
  if (plan.stripes().empty()) return absl::OkStatus();
  const int k = static_cast<int>(plan.k());
  const int m = static_cast<int>(plan.m());
  absl::StatusOr<tier::ErasureCode> code = tier::ErasureCode::Create(k, m);
  if (!code.ok()) return code.status();
  const uint64_t piece = plan.piece_bytes();
  std::atomic<uint64_t> bytes_sent{0};
  exec::StreamTasks tasks;
  const std::function<bool()> stop = tasks.Stop(cancelled);
  bool encodes = false;
  for (const v1::ErasureStripe& each : plan.stripes()) {
    // Each task keeps the stripe by address (the plan outlives the tasks).
    const v1::ErasureStripe* stripe_of_task = &each;
    const v1::ErasureStripe& stripe = each;
    for (int t = 0; t < k; ++t) {
      if (stripe.shares(t).host() != host) continue;
      for (int j = k; j < k + m; ++j) {
        tasks.Add([&, stripe_of_task, t, j] {
          const v1::ErasureStripe& stripe = *stripe_of_task;
          return SendShare(
              backend, dir, stripe, t, piece, stripe.shares(j).address(),
              [&](uint64_t q) {
                return PieceToken(plan.id(), plan.secret(), stripe.number(), q, t, j);
              },
              stop, &bytes_sent);
        });
      }
    }
    for (int j = k; j < k + m; ++j) {
      if (stripe.shares(j).host() != host) continue;
      encodes = true;
      tasks.Add([&, stripe_of_task, j]() -> absl::Status {
        const v1::ErasureStripe& stripe = *stripe_of_task;
        if (receiver == nullptr) {
          return absl::FailedPreconditionError(
              "this host keeps parity, but has no peer data channel (--peer_address)");
        }
        const v1::ReplicaFile& file = stripe.shares(j).files(0);
        absl::StatusOr<std::unique_ptr<storage::WritableFile>> out =
            backend.NewWritableFile(absl::StrCat(dir, "/", file.name()));
        if (!out.ok()) return out.status();
        std::vector<uint32_t> sources;
        for (int t = 0; t < k; ++t) sources.push_back(t);
        std::vector<std::unique_ptr<uint8_t[]>> buffers = Buffers(k + m, piece);
        std::vector<const uint8_t*> data;
        std::vector<uint8_t*> parity;
        for (int i = 0; i < k; ++i) data.push_back(buffers[i].get());
        for (int i = k; i < k + m; ++i) parity.push_back(buffers[i].get());
        for (uint64_t q = 0; q * piece < stripe.unit_bytes(); ++q) {
          const uint64_t length = std::min(piece, stripe.unit_bytes() - q * piece);
          absl::Status s = ReceivePiece(
              *receiver, stripe, sources, q, piece, length, buffers,
              [&](uint32_t i, uint64_t p) {
                return PieceToken(plan.id(), plan.secret(), stripe.number(), p, i, j);
              },
              stop, deadline);
          if (s.ok()) s = code->Encode(data, parity, length);
          if (s.ok()) s = (*out)->WriteAt(q * piece, buffers[j].get(), length);
          if (!s.ok()) return s;
        }
        absl::Status s = (*out)->Sync();
        absl::Status closed = (*out)->Close();
        return s.ok() ? closed : s;
      });
    }
  }
  std::shared_ptr<void> open;
  if (encodes && receiver != nullptr) {
    open = receiver->OpenPrefix(plan.id(), plan.secret());
    if (absl::Status s = backend.CreateDirs(absl::StrCat(dir, "/parity")); !s.ok()) return s;
  }
  absl::Status status = tasks.Run();
  *sent += bytes_sent.load();
  return status;
}

absl::Status RunRebuild(peer::PeerReceiver* receiver, storage::Backend& backend,
                        const std::string& dir, const std::string& rebuilt_dir,
                        const v1::ErasureRebuild& rebuild, const std::string& host,
                        const std::function<bool()>& cancelled, absl::Time deadline,
                        uint64_t* sent) {
  if (rebuild.stripes().empty()) return absl::OkStatus();
  const int k = static_cast<int>(rebuild.k());
  const int m = static_cast<int>(rebuild.m());
  absl::StatusOr<tier::ErasureCode> code = tier::ErasureCode::Create(k, m);
  if (!code.ok()) return code.status();
  const uint64_t piece = rebuild.piece_bytes();
  std::atomic<uint64_t> bytes_sent{0};
  RebuiltFiles rebuilt(backend, rebuilt_dir);
  exec::StreamTasks tasks;
  const std::function<bool()> stop = tasks.Stop(cancelled);
  bool rebuilds = false;
  for (const v1::StripeRebuild& sr : rebuild.stripes()) {
    const v1::StripeRebuild* sr_of_task = &sr;  // the rebuild outlives the tasks
    const v1::ErasureStripe& stripe = sr.stripe();
    std::vector<uint32_t> sources(sr.sources().begin(), sr.sources().end());
    std::set<uint32_t> unique(sources.begin(), sources.end());
    if (static_cast<int>(unique.size()) != k || *unique.rbegin() >= static_cast<uint32_t>(k + m) ||
        sr.lost_size() != 1 || stripe.shares_size() != k + m) {
      return absl::InvalidArgumentError(absl::StrCat("the coordinator's rebuild of stripe ",
                                                     stripe.number(), " names no k sources"));
    }
    for (uint32_t i : sources) {
      if (stripe.shares(i).host() != host) continue;
      tasks.Add([&, sr_of_task, i] {
        const v1::ErasureStripe& stripe = sr_of_task->stripe();
        return SendShare(
            backend, dir, stripe, i, piece, sr_of_task->rebuilder_address(),
            [&](uint64_t q) {
              return PieceToken(rebuild.rebuild_id(), rebuild.secret(), stripe.number(), q, i,
                                sr_of_task->lost(0));
            },
            stop, &bytes_sent);
      });
    }
    if (sr.rebuilder() != host) continue;
    rebuilds = true;
    for (uint32_t t : sr.lost()) {
      if (t >= static_cast<uint32_t>(k) || unique.count(t) > 0) {
        return absl::InvalidArgumentError(absl::StrCat("the coordinator's rebuild of stripe ",
                                                       stripe.number(), " loses share ", t));
      }
      if (absl::Status s = rebuilt.Create(stripe.shares(t)); !s.ok()) return s;
    }
    tasks.Add([&, sr_of_task, sources]() -> absl::Status {
      const v1::StripeRebuild& sr = *sr_of_task;
      const v1::ErasureStripe& stripe = sr.stripe();
      if (receiver == nullptr) {
        return absl::FailedPreconditionError(
            "this host rebuilds lost shares, but has no peer data channel (--peer_address)");
      }
      std::vector<std::unique_ptr<uint8_t[]>> buffers = Buffers(k + m, piece);
      std::vector<uint8_t*> shares;
      for (auto& b : buffers) shares.push_back(b.get());
      std::vector<bool> present_bits(k + m, false);
      for (uint32_t i : sources) present_bits[i] = true;
      std::unique_ptr<bool[]> present(new bool[k + m]);
      for (int i = 0; i < k + m; ++i) present[i] = present_bits[i];
      for (uint64_t q = 0; q * piece < stripe.unit_bytes(); ++q) {
        const uint64_t length = std::min(piece, stripe.unit_bytes() - q * piece);
        absl::Status s = ReceivePiece(
            *receiver, stripe, sources, q, piece, length, buffers,
            [&](uint32_t i, uint64_t p) {
              return PieceToken(rebuild.rebuild_id(), rebuild.secret(), stripe.number(), p, i,
                                sr.lost(0));
            },
            stop, deadline);
        if (s.ok())
          s = code->Reconstruct(
              shares, absl::Span<const bool>(present.get(), static_cast<size_t>(k + m)), length);
        for (uint32_t t : sr.lost()) {
          const uint64_t bytes = stripe.shares(t).bytes();
          const uint64_t at = q * piece;
          if (!s.ok() || at >= bytes) continue;
          s = rebuilt.Write(stripe.shares(t), at, reinterpret_cast<const char*>(buffers[t].get()),
                            std::min(length, bytes - at));
        }
        if (!s.ok()) return s;
      }
      return absl::OkStatus();
    });
  }
  std::shared_ptr<void> open;
  if (rebuilds && receiver != nullptr) {
    open = receiver->OpenPrefix(rebuild.rebuild_id(), rebuild.secret());
  }
  absl::Status status = tasks.Run();
  *sent += bytes_sent.load();
  absl::Status closed = rebuilt.Close();
  return status.ok() ? closed : status;
}

}  // namespace ckpt::tier
