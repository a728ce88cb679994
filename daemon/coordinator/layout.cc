#include "daemon/coordinator/layout.h"

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"

namespace ckpt::coordinator {

std::optional<int64_t> ParseStepDirName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "step-")) return std::nullopt;
  int64_t step = 0;
  if (name.empty() || !absl::SimpleAtoi(name, &step) || step < 0) return std::nullopt;
  return step;
}

bool IsPartialDirName(absl::string_view name) {
  return absl::StartsWith(name, ".step-") && absl::StrContains(name, ".partial-");
}

}  // namespace ckpt::coordinator
