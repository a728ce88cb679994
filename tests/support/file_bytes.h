// Damaging files on disk the way a bad disk or a stray write would, for
// tests that check the damage is found and named.
#ifndef CKPT_TESTS_SUPPORT_FILE_BYTES_H_
#define CKPT_TESTS_SUPPORT_FILE_BYTES_H_

#include <cstdint>
#include <string>

namespace ckpt::testing {

// XORs the byte at `offset` of `path` with `mask` and fsyncs the file;
// fails the test (REQUIRE) if it cannot.
void FlipByte(const std::string& path, uint64_t offset, uint8_t mask = 0x20);

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_SUPPORT_FILE_BYTES_H_
