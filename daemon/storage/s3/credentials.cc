#include "daemon/storage/s3/credentials.h"

#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "proto/lib/secret_file.h"

namespace ckpt::storage::s3 {
namespace {

constexpr size_t kMaxFileBytes = 1 << 20;

std::string Env(const CredentialSources& s, const char* name) {
  const char* v = s.getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

std::string ProfileOf(const CredentialSources& s) {
  if (!s.profile.empty()) return s.profile;
  const std::string env = Env(s, "AWS_PROFILE");
  return env.empty() ? "default" : env;
}

absl::StatusOr<LoadedCredentials> FromFile(const std::string& path, const std::string& profile,
                                           const char* what) {
  absl::StatusOr<std::string> text = ReadSecretFile(path, what, kMaxFileBytes);
  if (!text.ok()) return text.status();
  absl::StatusOr<Credentials> c = CredentialsFromIni(*text, profile, path);
  if (!c.ok()) return c.status();
  return LoadedCredentials{*std::move(c), absl::StrCat(path, " [", profile, "]")};
}

}  // namespace

absl::StatusOr<Credentials> CredentialsFromIni(absl::string_view text, const std::string& profile,
                                               const std::string& path) {
  std::map<std::string, std::string> keys;
  bool in_profile = false, found = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      absl::string_view name = absl::StripAsciiWhitespace(line.substr(1, line.size() - 2));
      absl::ConsumePrefix(&name, "profile ");
      in_profile = absl::StripAsciiWhitespace(name) == profile;
      found = found || in_profile;
      continue;
    }
    if (!in_profile) continue;
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    keys[absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, eq)))] =
        std::string(absl::StripAsciiWhitespace(line.substr(eq + 1)));
  }
  if (!found) {
    return absl::NotFoundError(absl::StrCat(path, ": no profile [", profile, "]"));
  }
  Credentials c{keys["aws_access_key_id"], keys["aws_secret_access_key"],
                keys["aws_session_token"]};
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": profile [", profile, "] lacks aws_access_key_id or aws_secret_access_key"));
  }
  return c;
}

absl::StatusOr<LoadedCredentials> LoadCredentials(const CredentialSources& sources) {
  const std::string profile = ProfileOf(sources);
  if (!sources.file.empty()) return FromFile(sources.file, profile, "--s3_credentials_file");
  const std::string id = Env(sources, "AWS_ACCESS_KEY_ID");
  const std::string secret = Env(sources, "AWS_SECRET_ACCESS_KEY");
  if (!id.empty() || !secret.empty()) {
    if (id.empty() || secret.empty()) {
      return absl::InvalidArgumentError(
          "the environment has one of AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, not both");
    }
    return LoadedCredentials{{id, secret, Env(sources, "AWS_SESSION_TOKEN")}, "environment"};
  }
  std::string shared = Env(sources, "AWS_SHARED_CREDENTIALS_FILE");
  if (shared.empty()) {
    const std::string home = Env(sources, "HOME");
    if (home.empty()) {
      return absl::NotFoundError(
          "no S3 credentials: no credentials file named, none in the environment, and no HOME "
          "for ~/.aws/credentials");
    }
    shared = home + "/.aws/credentials";
  }
  absl::StatusOr<LoadedCredentials> loaded = FromFile(shared, profile, "S3 credentials");
  if (!loaded.ok()) {
    return absl::Status(
        loaded.status().code(),
        absl::StrCat("no S3 credentials in the environment, and ", loaded.status().message()));
  }
  return loaded;
}

}  // namespace ckpt::storage::s3
