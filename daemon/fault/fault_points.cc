#include "daemon/fault/fault_points.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "absl/time/clock.h"

namespace ckpt {
#ifdef CKPT_FAULT_INJECTION
namespace {

std::string& ArmedName() {
  static std::string name;
  return name;
}
std::atomic<bool> armed{false};
absl::Duration pause_for;
std::string& CorruptionName() {
  static std::string name;
  return name;
}
std::atomic<bool> corruption_armed{false};

}  // namespace
#endif

#ifdef CKPT_FAULT_INJECTION

void ArmFaultPoint(std::string name, absl::Duration pause) {
  ArmedName() = std::move(name);
  pause_for = pause;
  armed.store(!ArmedName().empty(), std::memory_order_release);
}

void FaultPoint(absl::string_view name) {
  if (!armed.load(std::memory_order_acquire) || name != ArmedName()) return;
  if (pause_for > absl::ZeroDuration()) {
    std::fprintf(stderr, "ckptd: fault point %.*s reached, pausing for %s\n",
                 static_cast<int>(name.size()), name.data(),
                 absl::FormatDuration(pause_for).c_str());
    std::fflush(stderr);
    absl::SleepFor(pause_for);
    return;
  }
  std::fprintf(stderr, "ckptd: fault point %.*s reached, killing myself\n",
               static_cast<int>(name.size()), name.data());
  std::fflush(stderr);
  kill(getpid(), SIGKILL);
}

void ArmCorruptionPoint(std::string name) {
  CorruptionName() = std::move(name);
  corruption_armed.store(!CorruptionName().empty(), std::memory_order_release);
}

bool CorruptionPoint(absl::string_view name) {
  if (!corruption_armed.load(std::memory_order_acquire) || name != CorruptionName()) return false;
  std::fprintf(stderr, "ckptd: corruption point %.*s reached, flipping a byte\n",
               static_cast<int>(name.size()), name.data());
  return true;
}

#else  // a release build: no point can be armed, reaching one costs nothing

void ArmFaultPoint(std::string, absl::Duration) {}
void FaultPoint(absl::string_view) {}
void ArmCorruptionPoint(std::string) {}
bool CorruptionPoint(absl::string_view) { return false; }

#endif

}  // namespace ckpt
