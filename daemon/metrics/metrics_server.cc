#include "daemon/metrics/metrics_server.h"

#include <exception>

#include <prometheus/exposer.h>

#include "absl/strings/str_cat.h"

namespace ckpt::metrics {

MetricsServer::MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, int port)
    : exposer_(std::move(exposer)), port_(port) {}

MetricsServer::~MetricsServer() = default;

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address,
                                                                    const Metrics& metrics) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // Two threads: scrapes are rare and cheap; they need not compete with
    // the writers.
    exposer = std::make_unique<prometheus::Exposer>(address, 2);
  } catch (const std::exception& e) {
    // civetweb reports a port in use or a bad address by throwing.
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on --metrics_address=", address, ": ", e.what()));
  }
  for (const auto& collectable : metrics.Collectables()) exposer->RegisterCollectable(collectable);
  const std::vector<int> ports = exposer->GetListeningPorts();
  const int port = ports.empty() ? 0 : ports.front();
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(exposer), port));
}

}  // namespace ckpt::metrics
