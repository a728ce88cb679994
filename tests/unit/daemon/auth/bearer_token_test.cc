#include "daemon/auth/bearer_token.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "tests/catch.h"

namespace ckpt::auth {
namespace {

std::string WriteFile(const std::string& text, mode_t mode) {
  char pattern[] = "/tmp/ckpt-token-XXXXXX";
  const int fd = mkstemp(pattern);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  close(fd);
  REQUIRE(chmod(pattern, mode) == 0);
  return pattern;
}

TEST_CASE("tokens compare whole and exact", "[auth]") {
  CHECK(ConstantTimeEquals("abcdef", "abcdef"));
  CHECK_FALSE(ConstantTimeEquals("abcdef", "abcdeg"));
  CHECK_FALSE(ConstantTimeEquals("abcdef", "abcde"));
  CHECK_FALSE(ConstantTimeEquals("", "a"));
  const BearerTokens tokens("admin-token-0123456789", "read-token-0123456789");
  CHECK(tokens.Check("Bearer admin-token-0123456789") == Permission::kAdmin);
  CHECK(tokens.Check("Bearer read-token-0123456789") == Permission::kRead);
  CHECK(tokens.Check("Bearer admin-token-012345678") == Permission::kNone);
  CHECK(tokens.Check("admin-token-0123456789") == Permission::kNone);  // no scheme
  CHECK(tokens.Check("Basic admin-token-0123456789") == Permission::kNone);
  CHECK(tokens.Check("") == Permission::kNone);
  // An empty configured token never matches an empty presented one.
  const BearerTokens admin_only("admin-token-0123456789", "");
  CHECK(admin_only.Check("Bearer ") == Permission::kNone);
}

TEST_CASE("token files: owner-only, long enough, printable; whitespace trimmed", "[auth]") {
  const std::string good = WriteFile("  0123456789abcdef0123\n", 0600);
  absl::StatusOr<std::string> token = ReadTokenFile(good, "--token_file");
  REQUIRE(token.ok());
  CHECK(*token == "0123456789abcdef0123");

  const std::string open = WriteFile("0123456789abcdef0123\n", 0644);
  absl::StatusOr<std::string> refused = ReadTokenFile(open, "--token_file");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().message().find("chmod 600") != absl::string_view::npos);

  const std::string short_token = WriteFile("short\n", 0600);
  CHECK_FALSE(ReadTokenFile(short_token, "--token_file").ok());
  const std::string binary = WriteFile(std::string("0123456789abcdef\x01", 17), 0600);
  CHECK_FALSE(ReadTokenFile(binary, "--token_file").ok());
  absl::StatusOr<std::string> missing = ReadTokenFile("/nonexistent/token", "--read_token_file");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().message().find("--read_token_file") != absl::string_view::npos);
  for (const std::string& path : {good, open, short_token, binary}) unlink(path.c_str());
}

}  // namespace
}  // namespace ckpt::auth
