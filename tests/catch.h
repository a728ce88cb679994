// Catch2 for the tests, whichever major version Debian ships: v2 on Debian
// 12 (one header, catch2/catch.hpp), v3 on Debian 13 (catch2/catch_all.hpp,
// with the string matchers and Approx moved into namespaces). Every test
// includes this header, never Catch2's own, and writes the v2 names.
#ifndef CKPT_TESTS_CATCH_H_
#define CKPT_TESTS_CATCH_H_

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>

#include <string>

namespace Catch {
// v2's string matchers were Catch::Contains etc.; v3 keeps Contains for
// ranges and names the substring one ContainsSubstring.
inline Matchers::StringContainsMatcher Contains(const std::string& str,
                                                CaseSensitive cs = CaseSensitive::Yes) {
  return Matchers::ContainsSubstring(str, cs);
}
using Matchers::EndsWith;
using Matchers::Matches;
using Matchers::StartsWith;
}  // namespace Catch
using Catch::Approx;
#define CKPT_CATCH_MAJOR 3
#else
#include <catch2/catch.hpp>
#define CKPT_CATCH_MAJOR 2
#endif

#endif  // CKPT_TESTS_CATCH_H_
