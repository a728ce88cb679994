#include "daemon/coordinator/fault_points.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace ckpt {
#ifdef CKPT_FAULT_INJECTION
namespace {

std::string& ArmedName() {
  static std::string name;
  return name;
}
std::atomic<bool> armed{false};

}  // namespace
#endif

#ifdef CKPT_FAULT_INJECTION

void ArmFaultPoint(std::string name) {
  ArmedName() = std::move(name);
  armed.store(!ArmedName().empty(), std::memory_order_release);
}

void FaultPoint(absl::string_view name) {
  if (!armed.load(std::memory_order_acquire) || name != ArmedName()) return;
  std::fprintf(stderr, "ckptd: fault point %.*s reached, killing myself\n",
               static_cast<int>(name.size()), name.data());
  std::fflush(stderr);
  kill(getpid(), SIGKILL);
}

#else  // a release build: no point can be armed, reaching one costs nothing

void ArmFaultPoint(std::string) {}
void FaultPoint(absl::string_view) {}

#endif

}  // namespace ckpt
