// What a memory-tier file was when its bytes were verified, so that a load
// can tell they have not changed since without reading them again.
//
// The daemon never writes a committed file: a rewrite takes a new inode
// (storage/memory/memory_backend.h), and its own mapping of a shared file
// is read-only (ptrace cannot write through it either). Anything else that
// writes it (root, through /proc/<pid>/fd) goes through the kernel, which
// moves the file's change time on a write(2) and on the first store to a
// page of a new shared mapping. Not on a store to a page that mapping had
// already read: tmpfs maps a read writable at once. A process with the
// rights to open ckptd's files for writing can also change its code. The stamp is taken right
// before the bytes are read; since Linux 6.13 (multigrain timestamps, tmpfs included) a change made
// after that read of the time always shows in it, and before, a write within the same clock tick as
// the file's last change could go unseen (its last change is its commit, long before). A stamp does
// not catch a bit going bad in RAM without a write: that is what ECC memory is for, and the
// freshness limit of a check (early_step_check.h) bounds how long it is trusted.
//
// Thread-safety: pure functions.
#ifndef CKPT_DAEMON_TIER_FILE_STAMP_H_
#define CKPT_DAEMON_TIER_FILE_STAMP_H_

#include <cstdint>
#include <optional>

namespace ckpt::tier {

struct FileStamp {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t change_ns = 0;
  int64_t modify_ns = 0;
  friend bool operator==(const FileStamp&, const FileStamp&) = default;
};

// The stamp of the open file `fd`; nullopt when fstat fails.
std::optional<FileStamp> StampOf(int fd);

}  // namespace ckpt::tier

#endif  // CKPT_DAEMON_TIER_FILE_STAMP_H_
