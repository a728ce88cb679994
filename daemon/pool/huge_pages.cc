#include "daemon/pool/huge_pages.h"

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace ckpt::pool {

uint64_t ShmemHugePageBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/smaps_rollup"));
  std::string key;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    uint64_t kib = 0;
    if (fields >> key >> kib && key == "ShmemPmdMapped:") return kib * 1024;
  }
  return 0;
}

std::string ShmemHugeSetting() {
  // "always within_size advise [never] deny force": the bracketed one.
  std::ifstream in(kShmemHugeSetting);
  std::string line;
  std::getline(in, line);
  const size_t open = line.find('[');
  const size_t close = line.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return "";
  return line.substr(open + 1, close - open - 1);
}

ScopedShmemHugeAdvise::ScopedShmemHugeAdvise() : old_(ShmemHugeSetting()) {
  if (old_ != "never" || geteuid() != 0) return;
  std::ofstream(kShmemHugeSetting) << "advise";
  changed_ = ShmemHugeSetting() == "advise";
}

ScopedShmemHugeAdvise::~ScopedShmemHugeAdvise() {
  if (changed_) std::ofstream(kShmemHugeSetting) << old_;
}

}  // namespace ckpt::pool
