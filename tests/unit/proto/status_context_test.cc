// WithContext and the errno mapping every layer uses.
#include "proto/lib/status_context.h"

#include <cerrno>
#include <string>

#include "tests/catch.h"

namespace ckpt {
namespace {

TEST_CASE("WithContext keeps the code and adds one separator", "[status_context]") {
  const absl::Status inner = absl::NotFoundError("open /r/MANIFEST: No such file or directory");
  const absl::Status outer = WithContext(WithContext(inner, "tensor w"), "save of job j step 3");
  CHECK(outer.code() == absl::StatusCode::kNotFound);
  CHECK(outer.message() ==
        "save of job j step 3: tensor w: open /r/MANIFEST: No such file or directory");
  CHECK(WithContext(absl::OkStatus(), "anything").ok());
  CHECK(WithContext(absl::OkStatus(), "anything").message().empty());
}

TEST_CASE("errno maps to one code everywhere", "[status_context]") {
  CHECK(ErrnoToCode(0) == absl::StatusCode::kOk);
  CHECK(ErrnoToCode(ENOENT) == absl::StatusCode::kNotFound);
  for (int err : {ENOSPC, EDQUOT, EFBIG, ENOMEM, EMFILE, ENFILE}) {
    INFO("errno " << err);
    CHECK(ErrnoToCode(err) == absl::StatusCode::kResourceExhausted);
  }
  for (int err : {EACCES, EPERM, EROFS}) {
    INFO("errno " << err);
    CHECK(ErrnoToCode(err) == absl::StatusCode::kPermissionDenied);
  }
  CHECK(ErrnoToCode(EEXIST) == absl::StatusCode::kAlreadyExists);
  for (int err : {ENOTDIR, EISDIR, ENOTEMPTY, EBUSY}) {
    INFO("errno " << err);
    CHECK(ErrnoToCode(err) == absl::StatusCode::kFailedPrecondition);
  }
  CHECK(ErrnoToCode(EINVAL) == absl::StatusCode::kInvalidArgument);
  CHECK(ErrnoToCode(ENAMETOOLONG) == absl::StatusCode::kInvalidArgument);
  CHECK(ErrnoToCode(EBADF) == absl::StatusCode::kInternal);
  CHECK(ErrnoToCode(EIO) == absl::StatusCode::kUnknown);

  const absl::Status s = ErrnoStatus(ENOSPC, "pwrite /x/data/h-0.bin at offset 4096");
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  CHECK(s.message() == "pwrite /x/data/h-0.bin at offset 4096: No space left on device");
  CHECK(ErrnoMessage(ENOENT) == "No such file or directory");
}

}  // namespace
}  // namespace ckpt
