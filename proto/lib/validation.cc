#include "proto/lib/validation.h"

#include "absl/strings/str_cat.h"

namespace ckpt {
namespace {

constexpr size_t kMaxNameBytes = 255;  // NAME_MAX

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

}  // namespace

absl::Status ValidateName(absl::string_view what, absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " name is empty"));
  if (name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " name is ", name.size(), " bytes; the limit is ", kMaxNameBytes));
  }
  if (name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat(what, " name '", name, "' is not allowed"));
  }
  for (char c : name) {
    if (!IsNameChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " name '", name, "' contains a character outside [A-Za-z0-9._-] (no paths)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ckpt
