#include "daemon/auth/principal.h"

#include <pwd.h>

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace ckpt::auth {
namespace {

constexpr char kUidPrefix[] = "uid ";
constexpr char kNamedPrefix[] = "principal ";
constexpr size_t kMaxPrincipalName = 64;

absl::StatusOr<uid_t> ParseUid(absl::string_view text) {
  uint32_t uid = 0;
  if (!absl::SimpleAtoi(text, &uid) || uid == Principal::kNoUid) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a uid"));
  }
  return static_cast<uid_t>(uid);
}

absl::StatusOr<uid_t> LookUpUser(absl::string_view name) {
  if (absl::StatusOr<uid_t> uid = ParseUid(name); uid.ok()) return uid;
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  const std::string text(name);
  if (getpwnam_r(text.c_str(), &entry, buffer.data(), buffer.size(), &found) != 0 ||
      found == nullptr) {
    return absl::NotFoundError(absl::StrCat("no local user named '", text,
                                            "' (a token's principal is \"principal:NAME\")"));
  }
  return found->pw_uid;
}

}  // namespace

absl::Status ValidatePrincipalName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxPrincipalName || name[0] == '.') {
    return absl::InvalidArgumentError(absl::StrCat("principal name '", name.substr(0, 80),
                                                   "' must be 1 to ", kMaxPrincipalName,
                                                   " characters, not starting with '.'"));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("principal name '", name.substr(0, 80),
                                                     "' has a character outside [A-Za-z0-9._-]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Principal> Principal::FromKey(absl::string_view key) {
  key = absl::StripAsciiWhitespace(key);
  if (absl::ConsumePrefix(&key, kUidPrefix)) {
    absl::StatusOr<uid_t> uid = ParseUid(key);
    if (!uid.ok()) return uid.status();
    return LocalUser(*uid);
  }
  if (absl::ConsumePrefix(&key, kNamedPrefix)) {
    if (absl::Status s = ValidatePrincipalName(key); !s.ok()) return s;
    return Named(std::string(key));
  }
  return absl::InvalidArgumentError("want \"uid <number>\" or \"principal <name>\"");
}

absl::StatusOr<Principal> Principal::FromOwnerSpec(absl::string_view spec) {
  if (absl::ConsumePrefix(&spec, "principal:")) {
    if (absl::Status s = ValidatePrincipalName(spec); !s.ok()) return s;
    return Named(std::string(spec));
  }
  absl::ConsumePrefix(&spec, "user:");
  absl::StatusOr<uid_t> uid = LookUpUser(spec);
  if (!uid.ok()) return uid.status();
  return LocalUser(*uid);
}

std::string Principal::Key() const {
  return is_local_user() ? absl::StrCat(kUidPrefix, uid_) : absl::StrCat(kNamedPrefix, name_);
}

std::string Principal::Describe() const {
  return is_local_user() ? DescribeUid(uid_) : absl::StrCat("principal '", name_, "' (TCP token)");
}

std::string DescribeUid(uid_t uid) {
  passwd entry{};
  passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) {
    return absl::StrCat("uid ", uid, " (", found->pw_name, ")");
  }
  return absl::StrCat("uid ", uid);
}

}  // namespace ckpt::auth
