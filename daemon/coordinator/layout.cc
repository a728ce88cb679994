#include "daemon/coordinator/layout.h"

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"

namespace ckpt::coordinator {

std::optional<int64_t> ParseStepDirName(absl::string_view name) {
  absl::string_view digits = name;
  if (!absl::ConsumePrefix(&digits, "step-")) return std::nullopt;
  int64_t step = 0;
  if (digits.empty() || !absl::SimpleAtoi(digits, &step) || step < 0) return std::nullopt;
  // SimpleAtoi also takes "+7", " 7" and "007"; only the spelling StepDir
  // produces names the step, or the catalog would list a step it cannot open.
  if (StepDirName(step) != name) return std::nullopt;
  return step;
}

bool IsPartialDirName(absl::string_view name) {
  return absl::StartsWith(name, ".step-") && absl::StrContains(name, ".partial-");
}

}  // namespace ckpt::coordinator
