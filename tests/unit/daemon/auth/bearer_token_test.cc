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
  std::optional<TokenGrant> admin = tokens.Check("Bearer admin-token-0123456789");
  REQUIRE(admin.has_value());
  CHECK(admin->principal == "admin");
  CHECK(admin->permissions == Permissions::All());
  std::optional<TokenGrant> read = tokens.Check("Bearer read-token-0123456789");
  REQUIRE(read.has_value());
  CHECK(read->principal == "read");
  // The read token only reads: no use (attach, save, load), no admin.
  CHECK(read->permissions.Has(Permission::kRead));
  CHECK_FALSE(read->permissions.Has(Permission::kUse));
  CHECK_FALSE(read->permissions.Has(Permission::kAdmin));
  CHECK_FALSE(tokens.Check("Bearer admin-token-012345678").has_value());
  CHECK_FALSE(tokens.Check("admin-token-0123456789").has_value());  // no scheme
  CHECK_FALSE(tokens.Check("Basic admin-token-0123456789").has_value());
  CHECK_FALSE(tokens.Check("").has_value());
  // An empty configured token never matches an empty presented one.
  const BearerTokens admin_only("admin-token-0123456789", "");
  CHECK_FALSE(admin_only.Check("Bearer ").has_value());
}

TEST_CASE("a tokens file names principals with exactly their permissions", "[auth]") {
  const std::string path = WriteFile(
      "# name permissions token\n"
      "trainer use   trainer-token-0123456789\n"
      "\n"
      "  dash   read  dash-token-0123456789  \n"
      "ops read,admin ops-token-0123456789\n",
      0600);
  BearerTokens tokens;
  absl::Status added = tokens.AddFile(path, "--tokens_file");
  INFO(added.ToString());
  REQUIRE(added.ok());
  std::optional<TokenGrant> trainer = tokens.Check("Bearer trainer-token-0123456789");
  REQUIRE(trainer.has_value());
  CHECK(trainer->principal == "trainer");
  CHECK(trainer->permissions.Has(Permission::kUse));
  CHECK_FALSE(trainer->permissions.Has(Permission::kRead));
  std::optional<TokenGrant> dash = tokens.Check("Bearer dash-token-0123456789");
  REQUIRE(dash.has_value());
  CHECK(dash->permissions.Describe() == "read");
  std::optional<TokenGrant> ops = tokens.Check("Bearer ops-token-0123456789");
  REQUIRE(ops.has_value());
  CHECK(ops->permissions.Describe() == "read,admin");
  unlink(path.c_str());

  struct Bad {
    const char* text;
    const char* says;
  };
  for (const Bad& bad :
       {Bad{"a use\n", "line 1"}, Bad{"a superuser tok-0123456789abcdef\n", "'superuser'"},
        Bad{"../x use tok-0123456789abcdef\n", "principal name"}, Bad{"a use short\n", "16"},
        Bad{"a use tok-0123456789abcdef\nb read tok-0123456789abcdef\n", "also"},
        Bad{"a use tok-0123456789abcdef\na read tok-0123456789abcdefg\n", "twice"},
        Bad{"# only a comment\n", "names no token"}}) {
    const std::string file = WriteFile(bad.text, 0600);
    BearerTokens refused;
    absl::Status s = refused.AddFile(file, "--tokens_file");
    INFO(bad.text << " -> " << s.ToString());
    CHECK(absl::IsInvalidArgument(s));
    CHECK(s.message().find(bad.says) != absl::string_view::npos);
    CHECK(s.message().find("--tokens_file") != absl::string_view::npos);
    unlink(file.c_str());
  }
  const std::string open = WriteFile("a use tok-0123456789abcdef\n", 0640);
  BearerTokens refused;
  CHECK(refused.AddFile(open, "--tokens_file").message().find("chmod 600") !=
        absl::string_view::npos);
  unlink(open.c_str());
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
  CHECK(missing.status().message() ==
        "--read_token_file: cannot open /nonexistent/token: No such file or directory");
  // The code follows the errno (proto/lib/status_context.h), as every file error's does.
  CHECK(absl::IsNotFound(missing.status()));
  for (const std::string& path : {good, open, short_token, binary}) unlink(path.c_str());
}

}  // namespace
}  // namespace ckpt::auth
