#include "daemon/storage/layout.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"

namespace ckpt::storage {

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

std::optional<int64_t> ParseLatestContents(absl::string_view contents) {
  if (!absl::ConsumeSuffix(&contents, "\n")) return std::nullopt;
  return ParseStepDirName(absl::StrCat("step-", contents));
}

namespace {

// ".step-<N><marker><host>-<instance>-<seq>", marker ".partial-" or ".trash-".
std::optional<PartialDirName> ParseOwnedDirName(absl::string_view name, absl::string_view marker) {
  absl::string_view rest = name;
  if (!absl::ConsumePrefix(&rest, ".step-")) return std::nullopt;
  const size_t dot = rest.find(marker);
  if (dot == absl::string_view::npos) return std::nullopt;
  PartialDirName out;
  const absl::string_view digits = rest.substr(0, dot);
  if (!ParseStepDirName(absl::StrCat("step-", digits)).has_value()) return std::nullopt;
  out.step = *ParseStepDirName(absl::StrCat("step-", digits));
  rest.remove_prefix(dot + marker.size());
  const size_t seq_dash = rest.rfind('-');
  if (seq_dash == absl::string_view::npos || seq_dash + 1 == rest.size()) return std::nullopt;
  for (char c : rest.substr(seq_dash + 1)) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  rest = rest.substr(0, seq_dash);
  if (rest.size() < kInstanceIdLength + 2) return std::nullopt;  // "<host>-<instance>"
  const absl::string_view instance = rest.substr(rest.size() - kInstanceIdLength);
  for (char c : instance) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) || absl::ascii_isupper(c)) {
      return std::nullopt;
    }
  }
  if (rest[rest.size() - kInstanceIdLength - 1] != '-') return std::nullopt;
  out.host = std::string(rest.substr(0, rest.size() - kInstanceIdLength - 1));
  out.instance = std::string(instance);
  return out;
}

}  // namespace

std::optional<PartialDirName> ParsePartialDirName(absl::string_view name) {
  return ParseOwnedDirName(name, ".partial-");
}

std::optional<PartialDirName> ParseTrashDirName(absl::string_view name) {
  return ParseOwnedDirName(name, ".trash-");
}

bool IsPartialDirName(absl::string_view name) {
  return absl::StartsWith(name, ".step-") && absl::StrContains(name, ".partial-");
}

}  // namespace ckpt::storage
