#include "proto/lib/validation.h"

#include <cstddef>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

absl::Status ValidateConfinedName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("file name is empty");
  if (name.size() > kMaxConfinedNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("file name of %d bytes is longer than the limit of %d", name.size(),
                        kMaxConfinedNameBytes));
  }
  // Printed with %s only once it is known to be short; its characters are
  // checked before anything else, so a hostile name cannot forge the message.
  int components = 0;
  for (absl::string_view rest = name;;) {
    const size_t slash = rest.find('/');
    const absl::string_view part = rest.substr(0, slash);
    ++components;
    if (part.empty() || part == "." || part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("file name \"", absl::CHexEscape(name),
                       "\" leaves its directory or has an empty component (it must be relative, "
                       "without \".\" or \"..\")"));
    }
    for (char c : part) {
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
        return absl::InvalidArgumentError(
            absl::StrCat("file name \"", absl::CHexEscape(name),
                         "\" has a character outside [A-Za-z0-9._-] in a component"));
      }
    }
    if (slash == absl::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  if (components > kMaxConfinedNameComponents) {
    return absl::InvalidArgumentError(
        absl::StrFormat("file name \"%s\" has %d components, more than the limit of %d", name,
                        components, kMaxConfinedNameComponents));
  }
  return absl::OkStatus();
}

}  // namespace ckpt
