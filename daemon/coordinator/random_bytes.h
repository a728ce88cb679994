// Random bytes for the ids and secrets that name peer transfers: from
// getrandom(2), which blocks only before the kernel's pool is seeded.
#ifndef CKPT_DAEMON_COORDINATOR_RANDOM_BYTES_H_
#define CKPT_DAEMON_COORDINATOR_RANDOM_BYTES_H_

#include <sys/random.h>

#include <cstddef>

namespace ckpt::coordinator {

inline void FillRandom(void* p, size_t n) {
  auto* bytes = static_cast<char*>(p);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::getrandom(bytes + got, n - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
  }
}

}  // namespace ckpt::coordinator

#endif  // CKPT_DAEMON_COORDINATOR_RANDOM_BYTES_H_
