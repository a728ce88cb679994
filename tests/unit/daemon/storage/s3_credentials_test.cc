// Where S3 credentials come from: the named file, then the environment,
// then the shared credentials file, each for one profile; files that are
// open to other users, missing profiles and half-set environments are
// refused by name, and no error carries a secret.
#include "daemon/storage/s3/credentials.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "tests/catch.h"

namespace ckpt::storage::s3 {
namespace {

constexpr char kFile[] = R"(# a comment
[default]
aws_access_key_id = AKIDDEFAULT
aws_secret_access_key = secret-default-0123456789

[profile training]
; the config file's spelling of a section
AWS_ACCESS_KEY_ID=AKIDTRAIN
aws_secret_access_key=  secret-train-0123456789
aws_session_token = token-train

[broken]
aws_access_key_id = AKIDBROKEN
)";

struct Dir {
  Dir() {
    char pattern[] = "/tmp/ckpt-s3-cred-XXXXXX";
    path = mkdtemp(pattern);
  }
  ~Dir() { std::filesystem::remove_all(path); }
  std::string Write(const std::string& name, const std::string& text, mode_t mode) {
    const std::string file = path + "/" + name;
    std::ofstream(file) << text;
    chmod(file.c_str(), mode);
    return file;
  }
  std::string path;
};

CredentialSources WithEnv(std::map<std::string, std::string> env) {
  CredentialSources s;
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(env));
  s.getenv = [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
  return s;
}

TEST_CASE("S3 credentials come from the named file, the environment, then ~/.aws", "[unit][s3]") {
  Dir dir;
  const std::string named = dir.Write("named", kFile, 0600);
  std::filesystem::create_directories(dir.path + "/home/.aws");
  dir.Write("home/.aws/credentials", kFile, 0600);

  SECTION("a named file wins over the environment, for AWS_PROFILE's profile") {
    CredentialSources s = WithEnv({{"AWS_ACCESS_KEY_ID", "AKIDENV"},
                                   {"AWS_SECRET_ACCESS_KEY", "secret-env"},
                                   {"AWS_PROFILE", "training"}});
    s.file = named;
    auto c = LoadCredentials(s);
    REQUIRE(c.ok());
    CHECK(c->credentials.access_key_id == "AKIDTRAIN");
    CHECK(c->credentials.secret_access_key == "secret-train-0123456789");
    CHECK(c->credentials.session_token == "token-train");
    CHECK(c->source == named + " [training]");
  }
  SECTION("the environment, with a session token") {
    auto c = LoadCredentials(WithEnv({{"AWS_ACCESS_KEY_ID", "AKIDENV"},
                                      {"AWS_SECRET_ACCESS_KEY", "secret-env"},
                                      {"AWS_SESSION_TOKEN", "tok"},
                                      {"HOME", dir.path + "/home"}}));
    REQUIRE(c.ok());
    CHECK(c->credentials.access_key_id == "AKIDENV");
    CHECK(c->credentials.session_token == "tok");
    CHECK(c->source == "environment");
  }
  SECTION("~/.aws/credentials, its default profile, or AWS_SHARED_CREDENTIALS_FILE") {
    auto c = LoadCredentials(WithEnv({{"HOME", dir.path + "/home"}}));
    REQUIRE(c.ok());
    CHECK(c->credentials.access_key_id == "AKIDDEFAULT");
    CHECK(c->credentials.session_token.empty());
    auto shared = LoadCredentials(WithEnv({{"AWS_SHARED_CREDENTIALS_FILE", named}}));
    REQUIRE(shared.ok());
    CHECK(shared->source == named + " [default]");
  }
  SECTION("refusals name what is wrong, never a secret") {
    CredentialSources half = WithEnv({{"AWS_ACCESS_KEY_ID", "AKIDENV"}});
    auto c = LoadCredentials(half);
    CHECK(absl::IsInvalidArgument(c.status()));
    CHECK(c.status().message().find("not both") != absl::string_view::npos);

    CredentialSources missing = WithEnv({{"AWS_PROFILE", "nope"}});
    missing.file = named;
    c = LoadCredentials(missing);
    CHECK(absl::IsNotFound(c.status()));
    CHECK(c.status().message().find("[nope]") != absl::string_view::npos);

    CredentialSources broken = WithEnv({});
    broken.file = named;
    broken.profile = "broken";
    c = LoadCredentials(broken);
    CHECK(absl::IsInvalidArgument(c.status()));
    CHECK(c.status().message().find("lacks") != absl::string_view::npos);

    CredentialSources open = WithEnv({});
    open.file = dir.Write("open", kFile, 0644);
    c = LoadCredentials(open);
    CHECK(absl::IsInvalidArgument(c.status()));
    CHECK(c.status().message().find("chmod 600") != absl::string_view::npos);

    CHECK(absl::IsNotFound(LoadCredentials(WithEnv({})).status()));
    for (const absl::Status& s : {LoadCredentials(half).status(), LoadCredentials(broken).status(),
                                  LoadCredentials(open).status()}) {
      CHECK(s.message().find("secret-") == absl::string_view::npos);
    }
  }
}

}  // namespace
}  // namespace ckpt::storage::s3
