// Deterministic tensor contents for tests and the demo: byte i of a
// tensor's flattened global bytes is a hash of (fqn, i), so any shard can be
// generated or checked on its own, in any process, under any sharding.
#ifndef CKPT_TOOLS_DEMO_TENSOR_PATTERN_H_
#define CKPT_TOOLS_DEMO_TENSOR_PATTERN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ckpt/types.h"

namespace ckpt::testing {

// Bytes of the region of the tensor, packed, filled with the pattern.
absl::StatusOr<std::vector<char>> PatternShard(const HostTensor& tensor);
// The number of bytes of `data` (packed region) that differ from the pattern,
// and the first differing packed offset in *first (if any differ).
absl::StatusOr<int64_t> CountMismatches(const HostTensor& tensor, const char* data,
                                        int64_t* first = nullptr);
// Every byte of the pattern 4 bits of entropy instead of 8 (about 2x for the
// chunk codecs), for this process, save and load alike; off by default.
void UseCompressiblePattern(bool on);
// Packed byte size of the tensor's region.
absl::StatusOr<int64_t> ShardBytes(const HostTensor& tensor);

}  // namespace ckpt::testing

#endif  // CKPT_TOOLS_DEMO_TENSOR_PATTERN_H_
