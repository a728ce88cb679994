// How a load's chunk reads stream through the pool: consecutive reads are
// gathered into groups of about batch_bytes, each laid out in one pool room,
// with the copies each rank makes out of it. Pure functions, so the layout is
// tested apart from the sessions.
//
// Thread-safety: pure functions.
#ifndef CKPT_DAEMON_PLANNING_LOAD_GROUPS_H_
#define CKPT_DAEMON_PLANNING_LOAD_GROUPS_H_

#include <cstdint>
#include <vector>

#include "ckpt/v1/coordinator.pb.h"
#include "ckpt/v1/node.pb.h"

namespace ckpt::planning {

struct GroupChunk {
  const v1::StoredChunk* chunk = nullptr;
  std::string owner;         // "tensor <fqn>" or "object <key>", for errors
  uint64_t room_offset = 0;  // aligned, unless it arrives from a peer
  std::string source;        // empty: read from storage; else the host that sends it
};

// A load spread over hosts: one group's chunks between this host and
// another, back to back in the order both ends list them.
struct GroupTransfer {
  std::string host;          // the other end
  uint64_t room_offset = 0;  // incoming: where the transfer lands (aligned)
  uint64_t bytes = 0;
  std::vector<size_t> chunks;  // indices into LoadGroup::chunks
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
  // A load spread over hosts only: the global group, and what this host
  // receives and sends of it.
  uint32_t peer_group = 0;
  std::vector<GroupTransfer> incoming;
  std::vector<GroupTransfer> outgoing;
};

// Groups the assignment's reads (tensor chunks, then objects; a global
// object several ranks want is read once). `on_device[rank][request]` says
// which tensor requests the daemon delivers to a GPU itself.
std::vector<LoadGroup> GroupLoadReads(const v1::LoadAssignment& assignment, int world_size,
                                      const std::vector<std::vector<bool>>& on_device,
                                      uint64_t batch_bytes, uint64_t alignment);
// A load spread over hosts (assignment.peers set; load_spread.h): one
// group per global group this host takes part in, in the global order,
// whatever the size (every host fills its rooms in that order, and a
// transfer lands in one room). In a group's room come the chunks this host
// reads (aligned), then each sender's transfer, its chunks back to back.
std::vector<LoadGroup> GroupSpreadLoadReads(const v1::LoadAssignment& assignment, int world_size,
                                            const std::vector<std::vector<bool>>& on_device,
                                            uint64_t alignment);

}  // namespace ckpt::planning

#endif  // CKPT_DAEMON_PLANNING_LOAD_GROUPS_H_
