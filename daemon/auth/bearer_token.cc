#include "daemon/auth/bearer_token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ckpt::auth {
namespace {

constexpr size_t kMinTokenBytes = 16;
constexpr size_t kMaxTokenBytes = 4096;

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const char* flag) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot open ", path, ": ", strerror(errno)));
  }
  struct stat st {};
  std::string text(kMaxTokenBytes + 1, '\0');
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = read(fd, text.data(), text.size());
  const int error = errno;
  close(fd);
  if (!S_ISREG(st.st_mode))
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not a regular file"));
  if (n < 0)
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": cannot read ", path, ": ", strerror(error)));
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " is open to other users (mode ",
                     absl::StrCat(absl::Hex(st.st_mode & 0777)),
                     "); make it readable by its owner only (chmod 600)"));
  }
  if (static_cast<size_t>(n) > kMaxTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " is longer than ", kMaxTokenBytes, " bytes"));
  }
  text.resize(static_cast<size_t>(n));
  std::string token(absl::StripAsciiWhitespace(text));
  if (token.size() < kMinTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": the token in ", path, " is shorter than ", kMinTokenBytes, " characters"));
  }
  for (char c : token) {
    // It travels as an HTTP/2 header value.
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": the token in ", path, " has a character outside printable ASCII"));
    }
  }
  return token;
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // The length is not secret (an attacker knows the usual token sizes);
  // the contents are compared in full whatever they hold.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(b[i]);
  }
  return diff == 0;
}

Permission BearerTokens::Check(absl::string_view authorization) const {
  if (!absl::StartsWith(authorization, kBearerPrefix)) return Permission::kNone;
  const absl::string_view token = authorization.substr(strlen(kBearerPrefix));
  // Both compared, so the timing does not tell which token was close.
  const bool admin = !admin_.empty() && ConstantTimeEquals(token, admin_);
  const bool read = !read_only_.empty() && ConstantTimeEquals(token, read_only_);
  if (admin) return Permission::kAdmin;
  if (read) return Permission::kRead;
  return Permission::kNone;
}

grpc::Status TokenAuthProcessor::Process(const InputMetadata& auth_metadata, grpc::AuthContext*,
                                         OutputMetadata*, OutputMetadata*) {
  auto it = auth_metadata.find(kAuthorizationKey);
  if (it == auth_metadata.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "ckptd needs a bearer token over TCP (authorization: Bearer <token>; "
                        "ckptctl --token-file)");
  }
  const absl::string_view value(it->second.data(), it->second.size());
  if (tokens_.Check(value) == Permission::kNone) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "ckptd refused the bearer token");
  }
  return grpc::Status::OK;
}

}  // namespace ckpt::auth
