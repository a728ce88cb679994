// Serves a Metrics' collectables on http://<address>/metrics (prometheus-cpp's
// Exposer, a civetweb server with its own threads).
//
// Thread-safety: Start and the destructor from one thread.
#ifndef CKPT_DAEMON_METRICS_METRICS_SERVER_H_
#define CKPT_DAEMON_METRICS_METRICS_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/metrics/metrics.h"

namespace prometheus {
class Exposer;
}

namespace ckpt::metrics {

class MetricsServer {
 public:
  // Listens on `address` ("127.0.0.1:9470", "0.0.0.0:9470"; port 0 picks a
  // free one). UNAVAILABLE naming the address when it cannot.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& address,
                                                              const Metrics& metrics);
  ~MetricsServer();  // stops serving; no scrape runs after it returns

  // The port it listens on (the one picked, for port 0).
  int port() const { return port_; }

 private:
  MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, int port);
  std::unique_ptr<prometheus::Exposer> exposer_;
  const int port_;
};

}  // namespace ckpt::metrics

#endif  // CKPT_DAEMON_METRICS_METRICS_SERVER_H_
