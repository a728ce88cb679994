#include "daemon/cluster/etcd_client.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "proto/lib/grpc_status.h"

namespace ckpt::cluster {
namespace {

// The prefix etcd's election keeps its campaigns under (its Go client's
// concurrency.Election does the same).
std::string ElectionPrefix(const std::string& name) { return absl::StrCat(name, "/"); }

// The end of a prefix range: the prefix with its last byte incremented.
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty()) {
    unsigned char last = static_cast<unsigned char>(prefix.back());
    if (last < 0xff) {
      prefix.back() = static_cast<char>(last + 1);
      return prefix;
    }
    prefix.pop_back();
  }
  return std::string(1, '\0');  // every key
}

// Answers after which another member may do better: this one is down,
// slow, or cut off from the quorum ("etcdserver: no leader").
bool TryAnotherMember(const grpc::Status& status) {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return true;
    default:
      // Not "election: no leader": that is the answer (no campaign stands).
      return status.error_message().find("etcdserver: no leader") != std::string::npos;
  }
}

}  // namespace

void EtcdCancel::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

bool EtcdCancel::cancelled() const {
  absl::MutexLock lock(&mu_);
  return cancelled_;
}

void EtcdCancel::Attach(grpc::ClientContext* context) {
  absl::MutexLock lock(&mu_);
  context_ = context;
  if (cancelled_) context->TryCancel();
}

void EtcdCancel::Detach() {
  absl::MutexLock lock(&mu_);
  context_ = nullptr;
}

std::vector<std::string> EtcdClient::ParseEndpoints(const std::string& list) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    // etcd's own flags write them as URLs.
    if (!absl::ConsumePrefix(&part, "http://")) absl::ConsumePrefix(&part, "https://");
    absl::ConsumeSuffix(&part, "/");
    out.emplace_back(part);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(std::vector<std::string> endpoints,
                                                               absl::Duration call_timeout) {
  if (endpoints.empty()) return absl::InvalidArgumentError("--etcd_endpoints names no member");
  for (const std::string& endpoint : endpoints) {
    const size_t colon = endpoint.rfind(':');
    int port = 0;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(endpoint.substr(colon + 1), &port) || port <= 0 || port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("--etcd_endpoints: '", endpoint, "' is not host:port"));
    }
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(endpoints), call_timeout));
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints, absl::Duration call_timeout)
    : endpoints_(std::move(endpoints)), call_timeout_(call_timeout) {
  for (const std::string& endpoint : endpoints_) {
    Member m;
    m.endpoint = endpoint;
    grpc::ChannelArguments arguments;
    // A member that went away is noticed within seconds, not minutes.
    arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 2000);
    arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
    arguments.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    m.channel = grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(), arguments);
    m.kv = etcdserverpb::KV::NewStub(m.channel);
    m.lease = etcdserverpb::Lease::NewStub(m.channel);
    m.maintenance = etcdserverpb::Maintenance::NewStub(m.channel);
    m.election = v3electionpb::Election::NewStub(m.channel);
    members_.push_back(std::move(m));
  }
}

absl::Status EtcdClient::OnAnyMember(
    const char* what, const std::function<grpc::Status(Member&, grpc::ClientContext&)>& call,
    EtcdCancel* cancel, absl::Duration timeout) {
  const bool deadline = cancel == nullptr || timeout > absl::ZeroDuration();
  if (timeout <= absl::ZeroDuration()) timeout = call_timeout_;
  const size_t first = current_.load(std::memory_order_relaxed);
  std::string errors;
  for (size_t tried = 0; tried < members_.size(); ++tried) {
    const size_t index = (first + tried) % members_.size();
    Member& member = members_[index];
    grpc::ClientContext context;
    // A member without a raft leader refuses at once instead of waiting.
    context.AddMetadata("hasleader", "true");
    if (deadline) context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    if (cancel != nullptr) cancel->Attach(&context);
    const grpc::Status status = call(member, context);
    if (cancel != nullptr) {
      cancel->Detach();
      if (cancel->cancelled())
        return absl::CancelledError(absl::StrCat("etcd ", what, ": cancelled"));
    }
    if (status.ok()) {
      current_.store(index, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    absl::StrAppend(&errors, errors.empty() ? "" : "; ", member.endpoint, ": ",
                    status.error_message());
    if (!TryAnotherMember(status)) {
      return absl::Status(FromGrpcStatus(status).code(), absl::StrCat("etcd ", what, ": ", errors));
    }
  }
  return absl::UnavailableError(absl::StrCat("etcd ", what, ": no member answered (", errors, ")"));
}

absl::StatusOr<int64_t> EtcdClient::GrantLease(absl::Duration ttl) {
  etcdserverpb::LeaseGrantRequest request;
  // Rounded up: the holder counts on at least the time it asked for.
  request.set_ttl(std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1)))));
  etcdserverpb::LeaseGrantResponse response;
  absl::Status s = OnAnyMember("lease grant", [&](Member& m, grpc::ClientContext& c) {
    return m.lease->LeaseGrant(&c, request, &response);
  });
  if (!s.ok()) return s;
  if (!response.error().empty()) {
    return absl::UnavailableError(absl::StrCat("etcd lease grant: ", response.error()));
  }
  return response.id();
}

absl::StatusOr<absl::Duration> EtcdClient::KeepAlive(int64_t lease) {
  etcdserverpb::LeaseKeepAliveRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseKeepAliveResponse response;
  bool answered = false;
  absl::Status s = OnAnyMember("lease keepalive", [&](Member& m, grpc::ClientContext& c) {
    // One renewal per stream: simple, and a renewal every second or so
    // costs nothing that matters.
    std::unique_ptr<grpc::ClientReaderWriter<etcdserverpb::LeaseKeepAliveRequest,
                                             etcdserverpb::LeaseKeepAliveResponse>>
        stream = m.lease->LeaseKeepAlive(&c);
    answered = stream->Write(request) && stream->Read(&response);
    stream->WritesDone();
    if (answered) c.TryCancel();  // the server keeps the stream open otherwise
    grpc::Status finished = stream->Finish();
    return answered ? grpc::Status::OK : finished;
  });
  if (!s.ok()) return s;
  if (response.ttl() <= 0) {
    return absl::NotFoundError(absl::StrFormat("etcd lease %x expired", lease));
  }
  return absl::Seconds(response.ttl());
}

absl::Status EtcdClient::RevokeLease(int64_t lease, absl::Duration timeout) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  return OnAnyMember(
      "lease revoke",
      [&](Member& m, grpc::ClientContext& c) {
        return m.lease->LeaseRevoke(&c, request, &response);
      },
      nullptr, timeout);
}

absl::StatusOr<EtcdLeaderKey> EtcdClient::Campaign(const std::string& name, int64_t lease,
                                                   const std::string& value, EtcdCancel& cancel,
                                                   absl::Duration timeout) {
  v3electionpb::CampaignRequest request;
  request.set_name(name);
  request.set_lease(lease);
  request.set_value(value);
  v3electionpb::CampaignResponse response;
  absl::Status s = OnAnyMember(
      "campaign",
      [&](Member& m, grpc::ClientContext& c) {
        return m.election->Campaign(&c, request, &response);
      },
      &cancel, timeout);
  if (!s.ok()) return s;
  return EtcdLeaderKey{.name = response.leader().name(),
                       .key = response.leader().key(),
                       .revision = response.leader().rev(),
                       .lease = response.leader().lease()};
}

absl::StatusOr<std::optional<EtcdCandidate>> EtcdClient::Leader(const std::string& name,
                                                                absl::Duration timeout) {
  v3electionpb::LeaderRequest request;
  request.set_name(name);
  v3electionpb::LeaderResponse response;
  absl::Status s = OnAnyMember(
      "leader",
      [&](Member& m, grpc::ClientContext& c) { return m.election->Leader(&c, request, &response); },
      nullptr, timeout);
  if (!s.ok()) {
    // etcd answers "election: no leader" (UNKNOWN) when no campaign stands.
    if (s.message().find("election: no leader") != std::string::npos) return std::nullopt;
    return s;
  }
  if (!response.has_kv()) return std::nullopt;
  return EtcdCandidate{.key = response.kv().key(),
                       .value = response.kv().value(),
                       .create_revision = response.kv().create_revision(),
                       .lease = response.kv().lease()};
}

absl::Status EtcdClient::Resign(const EtcdLeaderKey& leader, absl::Duration timeout) {
  v3electionpb::ResignRequest request;
  request.mutable_leader()->set_name(leader.name);
  request.mutable_leader()->set_key(leader.key);
  request.mutable_leader()->set_rev(leader.revision);
  request.mutable_leader()->set_lease(leader.lease);
  v3electionpb::ResignResponse response;
  return OnAnyMember(
      "resign",
      [&](Member& m, grpc::ClientContext& c) { return m.election->Resign(&c, request, &response); },
      nullptr, timeout);
}

absl::StatusOr<std::vector<EtcdCandidate>> EtcdClient::Candidates(const std::string& name) {
  etcdserverpb::RangeRequest request;
  const std::string prefix = ElectionPrefix(name);
  request.set_key(prefix);
  request.set_range_end(PrefixEnd(prefix));
  request.set_sort_target(etcdserverpb::RangeRequest::CREATE);
  request.set_sort_order(etcdserverpb::RangeRequest::ASCEND);
  request.set_limit(64);  // a handful of coordinators; never a whole keyspace
  etcdserverpb::RangeResponse response;
  absl::Status s = OnAnyMember("range", [&](Member& m, grpc::ClientContext& c) {
    return m.kv->Range(&c, request, &response);
  });
  if (!s.ok()) return s;
  std::vector<EtcdCandidate> out;
  for (const mvccpb::KeyValue& kv : response.kvs()) {
    out.push_back({.key = kv.key(),
                   .value = kv.value(),
                   .create_revision = kv.create_revision(),
                   .lease = kv.lease()});
  }
  return out;
}

std::vector<EtcdMemberHealth> EtcdClient::Health() {
  std::vector<EtcdMemberHealth> out;
  for (Member& member : members_) {
    EtcdMemberHealth h;
    h.endpoint = member.endpoint;
    grpc::ClientContext context;
    // Briefly: a down member should not keep ckptctl cluster waiting.
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + std::min(call_timeout_, absl::Seconds(1))));
    etcdserverpb::StatusResponse response;
    const grpc::Status status =
        member.maintenance->Status(&context, etcdserverpb::StatusRequest(), &response);
    if (!status.ok()) {
      h.error = status.error_message();
    } else if (response.leader() == 0) {
      h.error = "no raft leader (cut off from the quorum)";
      h.version = response.version();
    } else {
      h.ok = true;
      h.version = response.version();
      h.raft_term = response.raftterm();
      h.is_raft_leader = response.leader() == response.header().member_id();
    }
    out.push_back(std::move(h));
  }
  return out;
}

}  // namespace ckpt::cluster
