#include "daemon/storage/s3/s3_root.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "daemon/storage/s3/credentials.h"
#include "daemon/storage/s3/s3_backend.h"

namespace ckpt::storage::s3 {

absl::StatusOr<std::unique_ptr<Backend>> OpenS3Root(const std::string& root,
                                                    const S3Settings& settings) {
  auto named = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("storage root ", root, ": ", s.message()));
  };
  absl::StatusOr<std::pair<std::string, std::string>> url = ParseS3Url(root);
  if (!url.ok()) return url.status();
  CredentialSources sources;
  sources.file = settings.credentials_file;
  sources.profile = settings.profile;
  absl::StatusOr<LoadedCredentials> credentials = LoadCredentials(sources);
  if (!credentials.ok()) return named(credentials.status());
  S3BackendOptions options;
  options.bucket = url->first;
  options.client.region = settings.region;
  options.client.endpoint = settings.endpoint;
  options.client.virtual_host = settings.virtual_host;
  if (options.client.endpoint.empty()) {
    options.client.endpoint = absl::StrCat("https://s3.", settings.region, ".amazonaws.com");
    options.client.virtual_host = true;
  }
  options.client.ca_file = settings.ca_file;
  options.client.credentials = credentials->credentials;
  options.client.retry.deadline = absl::Seconds(std::max(1, settings.request_deadline_s));
  options.transfer_threads = settings.transfer_threads;
  options.part_bytes = settings.part_bytes;
  absl::StatusOr<std::unique_ptr<S3Backend>> backend = NewS3Backend(options);
  if (!backend.ok()) return named(backend.status());
  std::fprintf(stderr,
               "ckpt: storage root %s: %s, credentials from %s; the server allows %d parts an "
               "upload%s\n",
               root.c_str(), (*backend)->Name().c_str(), credentials->source.c_str(),
               (*backend)->limits().max_parts,
               (*backend)->limits().conditional_create
                   ? " and honours conditional creates"
                   : "; no conditional creates: the coordinator is the one writer of commits");
  return std::unique_ptr<Backend>(std::move(*backend));
}

}  // namespace ckpt::storage::s3
