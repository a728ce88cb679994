// Adding context to an error as it crosses a layer (STYLE.md: each layer
// adds what it knows), keeping its code.
#ifndef CKPT_PROTO_LIB_STATUS_CONTEXT_H_
#define CKPT_PROTO_LIB_STATUS_CONTEXT_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ckpt {

// `prefix` + the message; OK stays OK.
inline absl::Status Prefixed(const absl::Status& s, absl::string_view prefix) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

}  // namespace ckpt

#endif  // CKPT_PROTO_LIB_STATUS_CONTEXT_H_
