// Skipping a test that cannot run on this machine (no GPU, say) so that
// ctest shows it as skipped, not passed. Catch2 v2 has no "skipped" result:
// a test case calls SkipTestCase(reason) and returns; the shared main
// (tests/catch_main.cc) exits with CKPT_SKIP_RETURN_CODE when every test
// case it ran skipped, and ckpt_add_test sets that as the test's
// SKIP_RETURN_CODE. A binary where some cases ran and others skipped passes,
// with each skip's reason in its output.
#ifndef CKPT_TESTS_CATCH_SKIP_H_
#define CKPT_TESTS_CATCH_SKIP_H_

#include <string>

namespace ckpt::testing {

// Warns "skipped: <reason>" and marks the running test case skipped. Call
// it from inside a TEST_CASE, then return.
void SkipTestCase(const std::string& reason);

}  // namespace ckpt::testing

#endif  // CKPT_TESTS_CATCH_SKIP_H_
