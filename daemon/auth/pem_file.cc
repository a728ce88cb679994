#include "daemon/auth/pem_file.h"

#include <cerrno>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "proto/lib/status_context.h"

namespace ckpt::auth {

absl::StatusOr<std::string> ReadPemFile(const std::string& path, const char* flag) {
  constexpr std::streamsize kMaxPemBytes = 1 << 20;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    // A stream need not set errno; a failed open(2) under it does.
    const int error = errno != 0 ? errno : EIO;
    return ErrnoStatus(error, absl::StrCat(flag, ": cannot open ", path));
  }
  std::string text(static_cast<size_t>(kMaxPemBytes) + 1, '\0');
  in.read(text.data(), kMaxPemBytes + 1);
  text.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<std::streamsize>(text.size()) > kMaxPemBytes) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is larger than 1 MiB"));
  }
  if (!absl::StrContains(text, "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a PEM file"));
  }
  return text;
}

}  // namespace ckpt::auth
