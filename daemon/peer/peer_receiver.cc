#include "daemon/peer/peer_receiver.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "daemon/auth/bearer_token.h"
#include "daemon/peer/peer_socket.h"

namespace ckpt::peer {
namespace {

PeerToken NewToken() {
  PeerToken token;
  size_t got = 0;
  while (got < token.bytes.size()) {
    const ssize_t n = ::getrandom(token.bytes.data() + got, token.bytes.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return token;
}

void SendAck(int fd, uint64_t received, absl::StatusCode code, const std::string& peer,
             uint32_t flags = 0) {
  char ack[kAckBytes] = {};
  PutU64(ack, received);
  PutU32(ack + 8, static_cast<uint32_t>(code));
  PutU32(ack + 12, flags);
  iovec iov{ack, sizeof ack};
  (void)WriteFull(fd, &iov, 1, peer);  // best effort: the sender may be gone
}

}  // namespace

// ---- PeerTransfer ------------------------------------------------------------

bool PeerTransfer::Claim(int fd) {
  absl::MutexLock lock(&mu_);
  if (claimed_ || done_) return false;
  claimed_ = true;
  writing_ = true;
  fd_ = fd;
  return true;
}

void PeerTransfer::Finish(const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  fd_ = -1;
  if (done_) return;
  if (!cancelled()) status_ = status;
  done_ = true;
}

void PeerTransfer::Cancel(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (done_) return;
  cancelled_.store(true, std::memory_order_release);
  status_ = why;
  // Cuts a sender off mid-recv; its thread then reports and lets go.
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  mu_.Await(absl::Condition(
      +[](PeerTransfer* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return !t->writing_; }, this));
  done_ = true;
}

bool PeerTransfer::AwaitDone(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(
      absl::Condition(
          +[](PeerTransfer* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return t->done_; }, this),
      deadline);
}

absl::Status PeerTransfer::Wait(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithDeadline(
        absl::Condition(
            +[](PeerTransfer* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return t->done_; }, this),
        deadline);
    if (done_) return status_;
  }
  Cancel(absl::DeadlineExceededError(absl::StrCat(what_, ": the sender did not finish in time; ",
                                                  received(), " of ", bytes_, " bytes arrived")));
  absl::MutexLock lock(&mu_);
  return status_;
}

absl::Status PeerTransfer::WaitUnless(absl::Time deadline, const std::function<bool()>& stop) {
  // Awake now and then to ask.
  while (!AwaitDone(std::min(deadline, absl::Now() + absl::Milliseconds(100)))) {
    if (stop && stop()) {
      Cancel(absl::CancelledError(absl::StrCat(what_, ": its owner stopped waiting")));
      return absl::CancelledError(absl::StrCat(what_, ": stopped waiting"));
    }
    if (absl::Now() >= deadline) break;
  }
  return Wait(deadline);
}

// ---- PeerReceiver ------------------------------------------------------------

absl::StatusOr<std::unique_ptr<PeerReceiver>> PeerReceiver::Start(
    const PeerReceiverOptions& options) {
  if (options.max_frame_bytes == 0 || options.max_connections < 1) {
    return absl::InvalidArgumentError(
        "peer receiver: frame limit and connections must be positive");
  }
  int port = 0;
  absl::StatusOr<int> listener = ListenTcp(options.listen_address, &port);
  if (!listener.ok()) return listener.status();
  std::unique_ptr<PeerReceiver> receiver(new PeerReceiver(options, *listener, port));
  receiver->acceptor_ = std::thread([r = receiver.get()] { r->AcceptLoop(); });
  return receiver;
}

PeerReceiver::~PeerReceiver() {
  stopping_.store(true);
  ::shutdown(listener_, SHUT_RDWR);  // wakes accept()
  if (acceptor_.joinable()) acceptor_.join();
  ::close(listener_);
  std::list<std::unique_ptr<Connection>> connections;
  {
    absl::MutexLock lock(&mu_);
    for (auto& c : connections_) ::shutdown(c->fd, SHUT_RDWR);
    connections.swap(connections_);
  }
  for (auto& c : connections) {
    c->thread.join();
    ::close(c->fd);
  }
}

ExpectedTransfer PeerReceiver::Expect(std::string what, char* base, uint64_t bytes) {
  return Expect(std::move(what), base, bytes, NewToken());
}

ExpectedTransfer PeerReceiver::Expect(std::string what, char* base, uint64_t bytes,
                                      const PeerToken& token) {
  std::shared_ptr<PeerTransfer> transfer(new PeerTransfer(std::move(what), base, bytes, token));
  absl::MutexLock lock(&mu_);
  for (auto it = expected_.begin(); it != expected_.end();) {
    it = it->second.expired() ? expected_.erase(it) : std::next(it);
  }
  expected_[std::string(transfer->token().id())] = transfer;
  return ExpectedTransfer(std::move(transfer));
}

std::shared_ptr<void> PeerReceiver::OpenPrefix(uint64_t id) {
  char prefix[kTokenPrefixBytes];
  PutU64(prefix, id);
  return OpenPrefix(std::string(prefix, sizeof prefix));
}

std::shared_ptr<void> PeerReceiver::OpenPrefix(std::string prefix) {
  {
    absl::MutexLock lock(&mu_);
    ++open_prefixes_[prefix];
  }
  return std::shared_ptr<void>(nullptr, [this, prefix = std::move(prefix)](void*) {
    absl::MutexLock lock(&mu_);
    auto it = open_prefixes_.find(prefix);
    if (it != open_prefixes_.end() && --it->second == 0) open_prefixes_.erase(it);
  });
}

namespace {

// Whether the other end of `fd` hung up (or the connection broke).
bool HungUp(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace

std::shared_ptr<PeerTransfer> PeerReceiver::AwaitExpected(const PeerToken& token, int fd) {
  const std::string id(token.id());
  const std::string prefix = id.substr(0, kTokenPrefixBytes);
  // Hosts get their parts of a load at about the same time, not at once:
  // a sender may come before this host opened the load's prefix. It gets
  // as long as a hello may take (a stranger can hold a connection that
  // long anyway); only a load this host takes part in keeps it longer.
  auto opened = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return stopping_.load() || expected_.count(id) > 0 || open_prefixes_.count(prefix) > 0;
  };
  auto ready = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return stopping_.load() || expected_.count(id) > 0 || open_prefixes_.count(prefix) == 0;
  };
  // Waited in slices: a sender that hangs up meanwhile (a stranger's
  // hello) gives its connection slot back at once, so a stream of them
  // cannot hold every slot. False: it hung up.
  auto wait = [&](const std::function<bool()>& condition, absl::Duration limit) {
    const absl::Time end = absl::Now() + limit;
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        if (mu_.AwaitWithTimeout(absl::Condition(&condition),
                                 std::min(end - absl::Now(), absl::Milliseconds(100)))) {
          return true;
        }
      }
      if (absl::Now() >= end) return true;
      if (HungUp(fd)) return false;
    }
  };
  if (!wait(opened, options_.hello_timeout) || !wait(ready, options_.claim_timeout)) return nullptr;
  return TakeExpected(token);
}

std::shared_ptr<PeerTransfer> PeerReceiver::TakeExpected(const PeerToken& token) {
  absl::MutexLock lock(&mu_);
  auto it = expected_.find(std::string(token.id()));
  if (it == expected_.end()) return nullptr;
  std::shared_ptr<PeerTransfer> transfer = it->second.lock();
  if (transfer == nullptr) {
    expected_.erase(it);
    return nullptr;
  }
  if (!auth::ConstantTimeEquals(transfer->token().secret(), token.secret())) return nullptr;
  expected_.erase(it);  // one use
  return transfer;
}

PeerReceiverStats PeerReceiver::Stats() const {
  PeerReceiverStats s;
  s.bytes_received = bytes_received_.load(std::memory_order_relaxed);
  s.transfers_completed = completed_.load(std::memory_order_relaxed);
  s.transfers_failed = failed_.load(std::memory_order_relaxed);
  s.connections_refused = connections_refused_.load(std::memory_order_relaxed);
  return s;
}

void PeerReceiver::ReapLocked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (!(*it)->finished.load(std::memory_order_acquire)) {
      ++it;
      continue;
    }
    (*it)->thread.join();
    ::close((*it)->fd);
    it = connections_.erase(it);
  }
}

void PeerReceiver::AcceptLoop() {
  while (!stopping_.load()) {
    const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_.load()) return;
      // Out of descriptors or buffers: give the connections in flight a
      // moment to end rather than spinning.
      if (errno != EINTR && errno != ECONNABORTED) absl::SleepFor(absl::Milliseconds(10));
      continue;
    }
    absl::MutexLock lock(&mu_);
    ReapLocked();
    if (static_cast<int>(connections_.size()) >= options_.max_connections) {
      Refuse();  // counted before the peer can see the close
      ::close(fd);
      continue;
    }
    auto connection = std::make_unique<Connection>();
    connection->fd = fd;
    Connection* c = connection.get();
    try {
      c->thread = std::thread([this, c] {
        Serve(c->fd);
        c->finished.store(true, std::memory_order_release);
      });
    } catch (const std::system_error&) {  // out of threads: this one waits its turn
      Refuse();
      ::close(fd);
      continue;
    }
    connections_.push_back(std::move(connection));
  }
}

void PeerReceiver::Serve(int fd) {
  const std::string peer = PeerName(fd);
  SetTimeouts(fd, options_.hello_timeout, options_.idle_timeout);
  char hello[kHelloBytes];
  if (!ReadFull(fd, hello, sizeof hello, peer, absl::Now() + options_.hello_timeout).ok() ||
      std::memcmp(hello, kMagic, sizeof kMagic) != 0 || GetU32(hello + 8) != kVersion) {
    Refuse();  // not a ckpt peer, or not this version: nothing to answer
    ::shutdown(fd, SHUT_RDWR);
    return;
  }
  PeerToken token;
  std::memcpy(token.bytes.data(), hello + 16, kTokenBytes);
  std::shared_ptr<PeerTransfer> transfer = AwaitExpected(token, fd);
  if (transfer == nullptr || !transfer->Claim(fd)) {
    Refuse();
    SendAck(fd, 0, absl::StatusCode::kPermissionDenied, peer);
    ::shutdown(fd, SHUT_RDWR);
    return;
  }
  SendAck(fd, 0, absl::StatusCode::kOk, peer, kReady);
  SetTimeouts(fd, options_.idle_timeout, options_.idle_timeout);
  const std::string from = absl::StrCat(transfer->what_, " from ", peer);
  absl::Status status;
  uint64_t received = 0;
  uint64_t next_offset = 0;  // frames come in order
  for (;;) {
    char header[kFrameHeaderBytes];
    if (status = ReadFull(fd, header, sizeof header, "the sender"); !status.ok()) break;
    const uint64_t offset = GetU64(header);
    const uint32_t length = GetU32(header + 8);
    const uint32_t flags = GetU32(header + 12);
    if (length > options_.max_frame_bytes) {
      status = absl::InvalidArgumentError(
          absl::StrCat("a frame of ", length, " bytes; the limit is ", options_.max_frame_bytes));
      break;
    }
    if (offset > transfer->bytes_ || length > transfer->bytes_ - offset) {
      status = absl::InvalidArgumentError(absl::StrCat("a frame for [", offset, ", +", length,
                                                       ") of a transfer of ", transfer->bytes_,
                                                       " bytes"));
      break;
    }
    // Frames in order, none overlapping: with the total checked at the end,
    // every byte of the destination was then written exactly once.
    if (offset < next_offset) {
      status = absl::InvalidArgumentError(absl::StrCat(
          "a frame at offset ", offset, " before the end of the previous one (", next_offset, ")"));
      break;
    }
    next_offset = offset + length;
    if (status = ReadFull(fd, transfer->base_ + offset, length, "the sender"); !status.ok()) {
      break;
    }
    received += length;
    transfer->received_.store(received, std::memory_order_relaxed);
    bytes_received_.fetch_add(length, std::memory_order_relaxed);
    if (received > transfer->bytes_) {
      status = absl::InvalidArgumentError(
          absl::StrCat(received, " bytes, more than the transfer's ", transfer->bytes_));
      break;
    }
    if ((flags & kLastFrame) != 0) {
      if (received != transfer->bytes_) {
        status = absl::DataLossError(
            absl::StrCat("the end after ", received, " of ", transfer->bytes_, " bytes"));
      }
      break;
    }
  }
  if (!status.ok()) {
    status = absl::Status(status.code(), absl::StrCat(from, ": ", status.message()));
  }
  transfer->Finish(status);
  (status.ok() ? completed_ : failed_).fetch_add(1, std::memory_order_relaxed);
  if (!status.ok() && !transfer->cancelled()) {
    absl::FPrintF(stderr, "ckptd: peer channel: %s\n", status.ToString());
  }
  SendAck(fd, received, status.code(), peer);
  // The peer sees the end now; the descriptor closes when the thread is
  // reaped.
  ::shutdown(fd, SHUT_RDWR);
}

}  // namespace ckpt::peer
