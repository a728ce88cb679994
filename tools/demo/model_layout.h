// A small "model" sharded the ways real trainers shard: tensor-parallel row
// and column boxes, data-parallel replicas, FSDP flat ranges cutting rows,
// a 0-d scalar; plus per-rank and global objects. The save layout and the
// load layout differ, so loading exercises resharding. `scale` multiplies
// the big dimensions (1: a few MiB for tests; ~40: a few hundred MiB).
#ifndef CKPT_TOOLS_DEMO_MODEL_LAYOUT_H_
#define CKPT_TOOLS_DEMO_MODEL_LAYOUT_H_

#include <string>
#include <vector>

#include "ckpt/types.h"

namespace ckpt::testing {

// Tensors (data == nullptr) that rank `rank` of `world` holds when saving.
std::vector<HostTensor> SaveLayout(int rank, int world, int scale);
// The same tensors under a different sharding, for loading.
std::vector<HostTensor> LoadLayout(int rank, int world, int scale);
// This rank's objects when saving: a per-rank "rng" and the global "dataloader".
std::vector<SaveObject> SaveObjects(int rank);
// The bytes of the rank's "rng" object and of the global "dataloader".
std::string RngObjectBytes(int rank);
std::string DataloaderObjectBytes();

}  // namespace ckpt::testing

#endif  // CKPT_TOOLS_DEMO_MODEL_LAYOUT_H_
