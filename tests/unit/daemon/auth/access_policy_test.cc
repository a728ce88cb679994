#include "daemon/auth/access_policy.h"

#include "tests/catch.h"

namespace ckpt::auth {
namespace {

constexpr uid_t kDaemon = 500;

AccessPolicy Make(const AccessLists& lists) {
  absl::StatusOr<AccessPolicy> policy = AccessPolicy::Create(lists, kDaemon);
  INFO(policy.status().ToString());
  REQUIRE(policy.ok());
  return *policy;
}

TEST_CASE("the daemon's user and root hold every permission, others none by default", "[auth]") {
  const AccessPolicy policy = Make({});
  CHECK(policy.Of({kDaemon, 1, {}}) == Permission::kAdmin);
  CHECK(policy.Of({0, 0, {}}) == Permission::kAdmin);
  CHECK(policy.Of({1001, 1001, {}}) == Permission::kNone);
  CHECK_FALSE(policy.AdmitsOthers());
}

TEST_CASE("lists grant by uid, primary group or supplementary group", "[auth]") {
  AccessLists lists;
  lists.use_users = {"1001"};
  lists.use_groups = {"2000"};
  lists.read_users = {"1002"};
  lists.admin_groups = {"3000"};
  const AccessPolicy policy = Make(lists);
  CHECK(policy.Of({1001, 1001, {}}) == Permission::kUse);
  CHECK(policy.Of({1003, 2000, {}}) == Permission::kUse);         // primary group
  CHECK(policy.Of({1004, 1004, {7, 2000}}) == Permission::kUse);  // supplementary
  CHECK(policy.Of({1002, 1002, {}}) == Permission::kRead);
  CHECK(policy.Of({1005, 1005, {3000}}) == Permission::kAdmin);
  // The highest grant wins.
  CHECK(policy.Of({1002, 3000, {}}) == Permission::kAdmin);
  CHECK(policy.Of({1006, 1006, {1, 2, 3}}) == Permission::kNone);
  CHECK(policy.AdmitsOthers());
}

TEST_CASE("names resolve at creation; an unknown one names itself and its flag", "[auth]") {
  AccessLists lists;
  lists.read_users = {"root"};
  lists.use_groups = {"root"};
  const AccessPolicy policy = Make(lists);
  CHECK(policy.Of({0, 0, {}}) == Permission::kAdmin);
  CHECK(policy.Describe().find("--read_users=root") != std::string::npos);

  lists.admin_users = {"no-such-user-ckpt"};
  absl::StatusOr<AccessPolicy> bad = AccessPolicy::Create(lists, kDaemon);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("--admin_users") != absl::string_view::npos);
  CHECK(bad.status().message().find("no-such-user-ckpt") != absl::string_view::npos);
}

TEST_CASE("listing only the daemon's own uid does not open the socket", "[auth]") {
  AccessLists lists;
  lists.use_users = {std::to_string(kDaemon)};
  CHECK_FALSE(Make(lists).AdmitsOthers());
}

}  // namespace
}  // namespace ckpt::auth
