// How a load's chunk reads stream through the pool: consecutive reads are
// gathered into groups of about batch_bytes, each laid out in one pool room,
// with the copies each rank makes out of it. Pure functions, so the layout is
// tested apart from the sessions.
//
// Thread-safety: pure functions.
#ifndef CKPT_DAEMON_SERVER_LOAD_GROUPS_H_
#define CKPT_DAEMON_SERVER_LOAD_GROUPS_H_

#include <cstdint>
#include <vector>

#include "ckpt/v1/coordinator.pb.h"
#include "ckpt/v1/node.pb.h"

namespace ckpt::server {

struct GroupChunk {
  const v1::StoredChunk* chunk = nullptr;
  std::string owner;         // "tensor <fqn>" or "object <key>", for errors
  uint64_t room_offset = 0;  // aligned
};

// A copy out of the room into a rank's request on the GPU, done by the daemon.
struct DeviceCopy {
  int rank = 0;
  uint32_t request = 0;
  v1::Delivery delivery;  // pool_offset relative to the room
};

struct LoadGroup {
  std::vector<GroupChunk> chunks;
  uint64_t room_bytes = 0;
  // Per rank (index = rank), the copies that rank makes; pool_offset is
  // relative to the room until the group is handed out.
  std::vector<std::vector<v1::Delivery>> host;
  std::vector<DeviceCopy> device;
};

// Groups the assignment's reads (tensor chunks, then objects; a global
// object several ranks want is read once). `on_device[rank][request]` says
// which tensor requests the daemon delivers to a GPU itself.
std::vector<LoadGroup> GroupLoadReads(const v1::LoadAssignment& assignment, int world_size,
                                      const std::vector<std::vector<bool>>& on_device,
                                      uint64_t batch_bytes, uint64_t alignment);

}  // namespace ckpt::server

#endif  // CKPT_DAEMON_SERVER_LOAD_GROUPS_H_
