// An S3 storage root ("s3://bucket/prefix") as ckptd and ckptctl open it:
// where the server is (--s3_endpoint, --s3_region, --s3_virtual_host,
// --s3_ca_file) and whose keys to use (--s3_credentials_file, --s3_profile,
// else AWS's environment variables and shared file: credentials.h).
#ifndef CKPT_DAEMON_STORAGE_S3_S3_ROOT_H_
#define CKPT_DAEMON_STORAGE_S3_S3_ROOT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/storage/backend.h"

namespace ckpt::storage::s3 {

struct S3Settings {
  // "http(s)://host[:port]"; empty: AWS's endpoint of the region, with
  // virtual-host addressing.
  std::string endpoint;
  std::string region = "us-east-1";
  bool virtual_host = false;
  std::string ca_file;
  std::string credentials_file;
  std::string profile;
  int transfer_threads = 16;
  uint64_t part_bytes = uint64_t{16} << 20;
  int request_deadline_s = 120;  // one request, all its retries
};

// The backend for an s3:// root: credentials loaded, the server probed.
// Errors name the root and what failed (never a secret).
absl::StatusOr<std::unique_ptr<Backend>> OpenS3Root(const std::string& root,
                                                    const S3Settings& settings);

}  // namespace ckpt::storage::s3

#endif  // CKPT_DAEMON_STORAGE_S3_S3_ROOT_H_
