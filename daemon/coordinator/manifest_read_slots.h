// How many MANIFESTs are read at once. Each read may hold up to
// --max_manifest_memory_bytes (its file, the parsed message, the checks)
// until it is validated; without a bound, concurrent inspect, verify and
// list calls of large manifests multiplied it by however many came at once.
// A read waits for a slot; one read holds one slot, never two, so waits
// cannot deadlock. What a caller keeps of the manifest after the read is
// its own (a load's plan, a verify's walk).
//
// Thread-safety: safe from any thread.
#ifndef CKPT_DAEMON_COORDINATOR_MANIFEST_READ_SLOTS_H_
#define CKPT_DAEMON_COORDINATOR_MANIFEST_READ_SLOTS_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace ckpt::coordinator {

// Reads of a daemon at once, over all its catalogs (durable and memory tier).
inline constexpr int kManifestReadSlots = 2;

class ManifestReadSlots {
 public:
  explicit ManifestReadSlots(int slots = kManifestReadSlots) : free_(slots < 1 ? 1 : slots) {}
  ManifestReadSlots(const ManifestReadSlots&) = delete;
  ManifestReadSlots& operator=(const ManifestReadSlots&) = delete;

  // Taken (waiting for one) when made, given back when destroyed.
  class Slot {
   public:
    explicit Slot(ManifestReadSlots& slots) : slots_(slots) { slots_.Acquire(); }
    ~Slot() { slots_.Release(); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

   private:
    ManifestReadSlots& slots_;
  };

  // Blocks until a slot is free; reads are short (one file, one parse).
  void Acquire();
  void Release();
  int free_slots() const;

 private:
  mutable absl::Mutex mu_;
  int free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_MANIFEST_READ_SLOTS_H_
