// The client's view of the daemon's shared-memory pool: the whole segment
// mapped once at attach; leases are offsets into it. Move-only RAII.
#ifndef CKPT_CLIENT_SRC_POOL_MAPPING_H_
#define CKPT_CLIENT_SRC_POOL_MAPPING_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ckpt::client {

class PoolMapping {
 public:
  static absl::StatusOr<std::unique_ptr<PoolMapping>> Open(const std::string& path, uint64_t bytes);
  ~PoolMapping();
  PoolMapping(const PoolMapping&) = delete;
  PoolMapping& operator=(const PoolMapping&) = delete;

  char* base() const { return base_; }
  uint64_t size() const { return size_; }
  // The lease [offset, offset + length) as a pointer, or an error when the
  // daemon handed out a range outside the mapping.
  absl::StatusOr<char*> Range(uint64_t offset, uint64_t length) const;

 private:
  PoolMapping(char* base, uint64_t size) : base_(base), size_(size) {}
  char* const base_;
  const uint64_t size_;
};

}  // namespace ckpt::client

#endif  // CKPT_CLIENT_SRC_POOL_MAPPING_H_
