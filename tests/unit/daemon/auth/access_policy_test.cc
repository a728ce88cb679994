#include "daemon/auth/access_policy.h"

#include "tests/catch.h"

namespace ckpt::auth {
namespace {

constexpr uid_t kDaemon = 500;

Permissions Set(const char* words) {
  if (std::string(words).empty()) return Permissions();
  return *Permissions::Parse(words);
}

AccessPolicy Make(const AccessLists& lists) {
  absl::StatusOr<AccessPolicy> policy = AccessPolicy::Create(lists, kDaemon);
  INFO(policy.status().ToString());
  REQUIRE(policy.ok());
  return *policy;
}

TEST_CASE("the daemon's user and root hold every permission, others none by default", "[auth]") {
  const AccessPolicy policy = Make({});
  CHECK(policy.Of({kDaemon, 1, {}}) == Permissions::All());
  CHECK(policy.Of({0, 0, {}}) == Permissions::All());
  CHECK(policy.Of({1001, 1001, {}}).empty());
  CHECK_FALSE(policy.AdmitsOthers());
}

TEST_CASE("lists grant exactly their permission, by uid, primary or supplementary group",
          "[auth]") {
  AccessLists lists;
  lists.use_users = {"1001"};
  lists.use_groups = {"2000"};
  lists.read_users = {"1002"};
  lists.admin_groups = {"3000"};
  const AccessPolicy policy = Make(lists);
  CHECK(policy.Of({1001, 1001, {}}) == Set("use"));
  CHECK(policy.Of({1003, 2000, {}}) == Set("use"));         // primary group
  CHECK(policy.Of({1004, 1004, {7, 2000}}) == Set("use"));  // supplementary
  // A reader only reads: it may not attach (use).
  CHECK(policy.Of({1002, 1002, {}}) == Set("read"));
  CHECK_FALSE(policy.Of({1002, 1002, {}}).Has(Permission::kUse));
  // An admin sees what it acts on, and still may not attach.
  CHECK(policy.Of({1005, 1005, {3000}}) == Set("read,admin"));
  CHECK_FALSE(policy.Of({1005, 1005, {3000}}).Has(Permission::kUse));
  // Grants add up.
  CHECK(policy.Of({1002, 3000, {}}) == Set("read,admin"));
  CHECK(policy.Of({1001, 3000, {}}) == Set("use,read,admin"));
  CHECK(policy.Of({1006, 1006, {1, 2, 3}}).empty());
  CHECK(policy.AdmitsOthers());
}

TEST_CASE("names resolve at creation; an unknown one names itself and its flag", "[auth]") {
  AccessLists lists;
  lists.read_users = {"root"};
  lists.use_groups = {"root"};
  const AccessPolicy policy = Make(lists);
  CHECK(policy.Of({0, 0, {}}) == Permissions::All());
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

TEST_CASE("the sockets reach one group when the lists name that group alone", "[auth]") {
  AccessLists lists;
  lists.use_groups = {"2000"};
  lists.read_groups = {"2000"};
  CHECK(Make(lists).SoleGroup() == std::optional<gid_t>(2000));
  lists.admin_groups = {"3000"};
  CHECK_FALSE(Make(lists).SoleGroup().has_value());  // two groups: everyone, checked at accept
  lists.admin_groups = {};
  lists.use_users = {"1001"};
  CHECK_FALSE(Make(lists).SoleGroup().has_value());  // a user: everyone, checked at accept
}

TEST_CASE("permission words parse exactly", "[auth]") {
  CHECK(Set("admin") == Set("read,admin"));  // admin brings read along
  CHECK_FALSE(Set("admin").Has(Permission::kUse));
  absl::StatusOr<Permissions> bad = Permissions::Parse("use,root");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("'root'") != absl::string_view::npos);
  CHECK_FALSE(Permissions::Parse("").ok());
}

}  // namespace
}  // namespace ckpt::auth
