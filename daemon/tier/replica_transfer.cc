#include "daemon/tier/replica_transfer.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/exec/stream_tasks.h"
#include "daemon/peer/peer_sender.h"
#include "daemon/peer/peer_wire.h"

namespace ckpt::tier {
namespace {

peer::PeerToken PieceToken(const v1::ReplicaPlan& plan, uint32_t piece, uint32_t sender,
                           uint32_t receiver) {
  return peer::TransferToken(plan.replica_id(), piece, static_cast<uint16_t>(sender),
                             static_cast<uint16_t>(receiver), plan.secret());
}

}  // namespace

absl::Status SendReplicas(storage::Backend& backend, const std::string& dir,
                          const v1::ReplicaPlan& plan, const std::function<bool()>& cancelled,
                          uint64_t* sent) {
  if (plan.send_to_size() == 0) return absl::OkStatus();
  const uint64_t piece_bytes = plan.piece_bytes();
  std::unique_ptr<char[]> buffer(new char[piece_bytes]);
  peer::PeerSendOptions options;
  options.cancelled = cancelled;
  for (const v1::ReplicaPeer& to : plan.send_to()) {
    uint32_t piece = 0;
    for (const v1::ReplicaFile& file : to.files()) {
      const std::string path = absl::StrCat(dir, "/", file.name());
      absl::StatusOr<std::unique_ptr<storage::ReadableFile>> in = backend.NewReadableFile(path);
      if (!in.ok()) return in.status();
      for (uint64_t at = 0; at < file.bytes(); at += piece_bytes, ++piece) {
        if (cancelled && cancelled()) return absl::CancelledError("the save ended");
        const uint64_t length = std::min(piece_bytes, file.bytes() - at);
        absl::StatusOr<size_t> read = (*in)->ReadAt(at, buffer.get(), length);
        if (!read.ok()) return read.status();
        if (*read != length) {
          return absl::DataLossError(
              absl::StrCat(path, " is shorter than its ", file.bytes(), " bytes planned"));
        }
        const peer::PeerBlockRef block{0, buffer.get(), length};
        absl::Status done = peer::PeerSend(
            to.address(), PieceToken(plan, piece, plan.index(), to.index()), {&block, 1}, options);
        if (!done.ok()) {
          return absl::Status(done.code(), absl::StrCat("replica of ", file.name(), " to host ",
                                                        to.host(), ": ", done.message()));
        }
        *sent += length;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ReceiveReplicas(peer::PeerReceiver& receiver, storage::Backend& backend,
                             const std::string& dir, const v1::ReplicaPlan& plan,
                             const std::function<bool()>& cancelled, absl::Time deadline) {
  if (plan.receive_from_size() == 0) return absl::OkStatus();
  // Senders that come before this host expects a piece wait for it.
  std::shared_ptr<void> open = receiver.OpenPrefix(plan.replica_id(), plan.secret());
  const uint64_t piece_bytes = plan.piece_bytes();
  // A stream per sender: each sender's pieces are taken as they come,
  // whatever the others do (a sender waits on its receivers in turn).
  exec::StreamTasks streams;
  const std::function<bool()> stop = streams.Stop(cancelled);
  for (const v1::ReplicaPeer& from : plan.receive_from()) {
    streams.Add([&, sender = &from]() -> absl::Status {
      std::unique_ptr<char[]> buffer(new char[piece_bytes]);
      uint32_t piece = 0;
      for (const v1::ReplicaFile& file : sender->files()) {
        const std::string path = absl::StrCat(dir, "/", file.name());
        absl::StatusOr<std::unique_ptr<storage::WritableFile>> out = backend.NewWritableFile(path);
        if (!out.ok()) return out.status();
        for (uint64_t at = 0; at < file.bytes(); at += piece_bytes, ++piece) {
          const uint64_t length = std::min(piece_bytes, file.bytes() - at);
          peer::ExpectedTransfer transfer = receiver.Expect(
              absl::StrCat("replica of ", file.name(), " from host ", sender->host()), buffer.get(),
              length, PieceToken(plan, piece, sender->index(), plan.index()));
          // A save that fails meanwhile stops waiting.
          if (absl::Status s = transfer->WaitUnless(deadline, stop); !s.ok()) return s;
          if (absl::Status s = (*out)->WriteAt(at, buffer.get(), length); !s.ok()) return s;
        }
        if (absl::Status s = (*out)->Sync(); !s.ok()) return s;
        if (absl::Status s = (*out)->Close(); !s.ok()) return s;
      }
      return absl::OkStatus();
    });
  }
  return streams.Run();
}

}  // namespace ckpt::tier
