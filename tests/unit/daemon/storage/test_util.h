// Helpers shared by the storage tests.
#ifndef CKPT_TESTS_UNIT_DAEMON_STORAGE_TEST_UTIL_H_
#define CKPT_TESTS_UNIT_DAEMON_STORAGE_TEST_UTIL_H_

#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tests/catch.h"

namespace ckpt::storage::testing {

inline absl::Status ToStatus(const absl::Status& s) { return s; }
template <typename T>
absl::Status ToStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

#define CKPT_REQUIRE_OK(expr)                                                   \
  do {                                                                          \
    const absl::Status ckpt_status_ = ::ckpt::storage::testing::ToStatus(expr); \
    INFO(ckpt_status_.ToString());                                              \
    REQUIRE(ckpt_status_.ok());                                                 \
  } while (0)

// Deterministic pseudo-random bytes: a different seed gives different data,
// so a misplaced block cannot compare equal.
inline std::string Pattern(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ULL + 1);
  std::string out(n, '\0');
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(out.data() + i, &v, 8);
  }
  for (; i < n; ++i) out[i] = static_cast<char>(rng());
  return out;
}

// A 4096-aligned buffer, rounded up to whole pages. Safe to create on any
// thread (Catch2 assertions are not).
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t n)
      : size_(n),
        data_(static_cast<char*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096 + 4096))) {
    if (data_ == nullptr) std::abort();  // no REQUIRE: used from worker threads
  }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  char* data() { return data_; }
  size_t size() const { return size_; }
  std::string str() const { return std::string(data_, size_); }

 private:
  size_t size_;
  char* data_;  // one spare page so data() + 1 can hold size() bytes too
};

// mkdtemp under base; removed with its contents on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& base) {
    std::string tmpl = base + "/ckpt-storage-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ckpt::storage::testing

#endif  // CKPT_TESTS_UNIT_DAEMON_STORAGE_TEST_UTIL_H_
