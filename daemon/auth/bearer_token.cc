#include "daemon/auth/bearer_token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "daemon/auth/principal.h"
#include "proto/lib/secret_file.h"
#include "proto/lib/status_context.h"

namespace ckpt::auth {
namespace {

constexpr size_t kMinTokenBytes = 16;
constexpr size_t kMaxTokenBytes = 4096;
constexpr size_t kMaxTokensFileBytes = 1 << 20;

}  // namespace

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, const char* flag) {
  absl::StatusOr<std::string> text = ReadSecretFile(path, flag, kMaxTokenBytes);
  if (!text.ok()) return text.status();
  std::string token(absl::StripAsciiWhitespace(*text));
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

BearerTokens::BearerTokens(std::string admin, std::string read_only) {
  if (!admin.empty()) {
    tokens_.push_back({std::move(admin), {"admin", Permissions::All()}});
  }
  if (!read_only.empty()) {
    tokens_.push_back({std::move(read_only), {"read", Permissions().Add(Permission::kRead)}});
  }
}

absl::Status BearerTokens::Add(std::string token, TokenGrant grant, const std::string& where) {
  if (token.size() < kMinTokenBytes || token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": the token of ", grant.principal,
                                                   " must be ", kMinTokenBytes, " to ",
                                                   kMaxTokenBytes, " characters"));
  }
  for (const Entry& e : tokens_) {
    if (e.grant.principal == grant.principal) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": principal ", grant.principal, " is given twice"));
    }
    if (ConstantTimeEquals(e.token, token)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the token of ", grant.principal,
                                                     " is also ", e.grant.principal, "'s"));
    }
  }
  tokens_.push_back({std::move(token), std::move(grant)});
  return absl::OkStatus();
}

absl::Status BearerTokens::AddFile(const std::string& path, const char* flag) {
  absl::StatusOr<std::string> text = ReadSecretFile(path, flag, kMaxTokensFileBytes);
  if (!text.ok()) return text.status();
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const std::string where = absl::StrCat(flag, ": ", path, " line ", line_number);
    std::vector<absl::string_view> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": want \"NAME PERMISSIONS TOKEN\" (e.g. \"ops read,admin <token>\")"));
    }
    if (absl::Status s = ValidatePrincipalName(words[0]); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
    }
    absl::StatusOr<Permissions> permissions = Permissions::Parse(words[1]);
    if (!permissions.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", permissions.status().message()));
    }
    for (char c : words[2]) {
      if (c < 0x21 || c > 0x7e) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": the token has a character outside printable ASCII"));
      }
    }
    if (absl::Status s = Add(std::string(words[2]), {std::string(words[0]), *permissions}, where);
        !s.ok()) {
      return s;
    }
  }
  if (tokens_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " names no token"));
  }
  return absl::OkStatus();
}

std::optional<TokenGrant> BearerTokens::Check(absl::string_view authorization) const {
  if (!absl::StartsWith(authorization, kBearerPrefix)) return std::nullopt;
  const absl::string_view token = authorization.substr(strlen(kBearerPrefix));
  // Every token compared, so the timing does not tell which one was close.
  const Entry* found = nullptr;
  for (const Entry& e : tokens_) {
    if (ConstantTimeEquals(token, e.token)) found = &e;
  }
  if (found == nullptr) return std::nullopt;
  return found->grant;
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
  if (!tokens_.Check(value).has_value()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "ckptd refused the bearer token");
  }
  return grpc::Status::OK;
}

}  // namespace ckpt::auth
