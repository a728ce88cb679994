#include "proto/lib/secret_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "proto/lib/status_context.h"

namespace ckpt {

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, const char* flag,
                                           size_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat(flag, ": cannot open ", path));
  struct stat st {};
  std::string text(max_bytes + 1, '\0');
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = read(fd, text.data(), text.size());
  const int error = errno;
  close(fd);
  if (!S_ISREG(st.st_mode))
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a regular file"));
  if (n < 0) return ErrnoStatus(error, absl::StrCat(flag, ": cannot read ", path));
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " is open to other users (mode ",
                     absl::StrCat(absl::Hex(st.st_mode & 0777)),
                     "); make it readable by its owner only (chmod 600)"));
  }
  if (static_cast<size_t>(n) > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " is longer than ", max_bytes, " bytes"));
  }
  text.resize(static_cast<size_t>(n));
  return text;
}

}  // namespace ckpt
