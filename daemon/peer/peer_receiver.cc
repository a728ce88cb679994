#include "daemon/peer/peer_receiver.h"

#include <poll.h>
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
#include "daemon/peer/peer_handshake.h"
#include "daemon/peer/peer_socket.h"

namespace ckpt::peer {
namespace {

// Bytes of a frame read and MAC'd at a time: small enough to be MAC'd
// while still in the cache the socket's copy left them in, large enough
// for few syscalls per byte.
constexpr uint64_t kAuthChunkBytes = 1 << 20;

PeerToken NewToken() {
  PeerToken token;
  FillRandom(token.id_bytes.data(), token.id_bytes.size());
  FillRandom(token.key.data(), token.key.size());
  return token;
}

template <size_t N>
void Send(int fd, const std::array<char, N>& message, const std::string& peer) {
  iovec iov{const_cast<char*>(message.data()), N};
  (void)WriteFull(fd, &iov, 1, peer);  // best effort: the sender may be gone
}

// Whether the other end of `fd` hung up (or the connection broke).
bool HungUp(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
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

PeerReceiver::PeerReceiver(const PeerReceiverOptions& options, int listener, int port)
    : options_(options),
      per_host_limit_(options.max_connections_per_host > 0
                          ? options.max_connections_per_host
                          : std::max(1, options.max_connections / 4)),
      listener_(listener),
      port_(port) {}

absl::StatusOr<std::unique_ptr<PeerReceiver>> PeerReceiver::Start(
    const PeerReceiverOptions& options) {
  if (options.max_frame_bytes == 0 || options.max_connections < 1 ||
      options.max_connections_per_host < 0) {
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

std::shared_ptr<void> PeerReceiver::OpenPrefix(uint64_t id, absl::string_view master_secret) {
  char prefix[kTokenPrefixBytes];
  PutU64(prefix, id);
  return OpenPrefixBytes(std::string(prefix, sizeof prefix), std::string(master_secret));
}

std::shared_ptr<void> PeerReceiver::OpenPrefixBytes(std::string prefix, std::string secret) {
  {
    absl::MutexLock lock(&mu_);
    Prefix& p = open_prefixes_[prefix];
    ++p.handles;
    // Every holder of one load's prefix was given the same secret.
    if (p.secret.empty()) p.secret = std::move(secret);
  }
  return std::shared_ptr<void>(nullptr, [this, prefix = std::move(prefix)](void*) {
    absl::MutexLock lock(&mu_);
    auto it = open_prefixes_.find(prefix);
    if (it != open_prefixes_.end() && --it->second.handles == 0) open_prefixes_.erase(it);
  });
}

PeerReceiver::Lookup PeerReceiver::FindKey(const std::string& id, int fd, absl::Time deadline,
                                           Key* key) {
  const std::string prefix = id.substr(0, kTokenPrefixBytes);
  // Hosts get their parts of a load at about the same time, not at once:
  // a sender may come before this host opened the load's prefix or
  // expected its transfer. It gets what is left of its hello timeout for
  // that (a stranger can hold a connection that long anyway).
  auto known = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS -> bool {
    if (stopping_.load()) return true;
    if (auto it = expected_.find(id); it != expected_.end() && !it->second.expired()) return true;
    auto it = open_prefixes_.find(prefix);
    return it != open_prefixes_.end() && !it->second.secret.empty();
  };
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      // Waited in slices: a sender that hangs up meanwhile gives its slot
      // back at once.
      mu_.AwaitWithDeadline(absl::Condition(&known),
                            std::min(deadline, absl::Now() + absl::Milliseconds(100)));
      if (stopping_.load()) return Lookup::kUnknown;
      if (auto it = expected_.find(id); it != expected_.end()) {
        if (std::shared_ptr<PeerTransfer> t = it->second.lock()) {
          *key = t->token().key;
          return Lookup::kKey;
        }
      }
      auto it = open_prefixes_.find(prefix);
      if (it != open_prefixes_.end() && !it->second.secret.empty()) {
        *key = TransferKey(it->second.secret, id);
        return Lookup::kKey;
      }
      if (absl::Now() >= deadline) {
        return it != open_prefixes_.end() ? Lookup::kRetry : Lookup::kUnknown;
      }
    }
    if (HungUp(fd)) return Lookup::kHungUp;
  }
}

bool PeerReceiver::FirstSight(const std::string& id, const Nonce& nonce) {
  absl::MutexLock lock(&mu_);
  auto it = open_prefixes_.find(id.substr(0, kTokenPrefixBytes));
  // Outside an open prefix a hello claims its transfer at once or not at
  // all: one seen again finds it taken.
  if (it == open_prefixes_.end()) return true;
  return it->second.seen.insert(absl::StrCat(id, View(nonce))).second;
}

std::shared_ptr<PeerTransfer> PeerReceiver::AwaitExpected(const std::string& id, const Key& key,
                                                          int fd) {
  const std::string prefix = id.substr(0, kTokenPrefixBytes);
  // Only a verified hello gets here: it may wait for its load's readers.
  auto ready = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return stopping_.load() || expected_.count(id) > 0 || open_prefixes_.count(prefix) == 0;
  };
  const absl::Time end = absl::Now() + options_.claim_timeout;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithDeadline(absl::Condition(&ready),
                                std::min(end, absl::Now() + absl::Milliseconds(100)))) {
        break;
      }
    }
    if (absl::Now() >= end) break;
    if (HungUp(fd)) return nullptr;
  }
  return TakeExpected(id, key);
}

std::shared_ptr<PeerTransfer> PeerReceiver::TakeExpected(const std::string& id, const Key& key) {
  absl::MutexLock lock(&mu_);
  auto it = expected_.find(id);
  if (it == expected_.end()) return nullptr;
  std::shared_ptr<PeerTransfer> transfer = it->second.lock();
  if (transfer == nullptr) {
    expected_.erase(it);
    return nullptr;
  }
  // The hello was checked with this key, or with the prefix's: the same
  // unless the owner expected the id with a key of its own.
  if (!ConstantTimeEquals(View(transfer->token().key), View(key))) return nullptr;
  expected_.erase(it);  // one use
  return transfer;
}

PeerReceiverStats PeerReceiver::Stats() const {
  PeerReceiverStats s;
  s.bytes_received = bytes_received_.load(std::memory_order_relaxed);
  s.transfers_completed = completed_.load(std::memory_order_relaxed);
  s.transfers_failed = failed_.load(std::memory_order_relaxed);
  s.connections_refused = connections_refused_.load(std::memory_order_relaxed);
  s.hellos_rejected = hellos_rejected_.load(std::memory_order_relaxed);
  s.hellos_verified = hellos_verified_.load(std::memory_order_relaxed);
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
    if (auto h = connections_per_host_.find((*it)->host);
        h != connections_per_host_.end() && --h->second <= 0) {
      connections_per_host_.erase(h);
    }
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
    const absl::Time accepted = absl::Now();
    std::string host = RemoteHost(fd);
    absl::MutexLock lock(&mu_);
    ReapLocked();
    // One host's connections (a stranger's silent ones) never take the
    // slots the others need.
    int& from_host = connections_per_host_[host];
    if (static_cast<int>(connections_.size()) >= options_.max_connections ||
        from_host >= per_host_limit_) {
      if (from_host == 0) connections_per_host_.erase(host);
      Refuse();  // counted before the peer can see the close
      ::close(fd);
      continue;
    }
    auto connection = std::make_unique<Connection>();
    connection->fd = fd;
    connection->host = host;
    Connection* c = connection.get();
    try {
      c->thread = std::thread([this, c, accepted] {
        Serve(c->fd, accepted);
        c->finished.store(true, std::memory_order_release);
      });
    } catch (const std::system_error&) {  // out of threads: this one waits its turn
      if (from_host == 0) connections_per_host_.erase(host);
      Refuse();
      ::close(fd);
      continue;
    }
    ++from_host;
    connections_.push_back(std::move(connection));
  }
}

void PeerReceiver::Serve(int fd, absl::Time accepted) {
  const std::string peer = PeerName(fd);
  // Everything up to a verified hello within the hello timeout of the
  // accept: no deadline below grows it.
  const absl::Time hello_deadline = accepted + options_.hello_timeout;
  SetTimeouts(fd, options_.hello_timeout, options_.idle_timeout);
  auto refuse = [&](absl::StatusCode code, uint32_t flags) {
    Refuse();
    Send(fd, PlainAck(0, code, flags), peer);
    ::shutdown(fd, SHUT_RDWR);
  };
  char hello[kHelloBytes];
  HelloFields fields;
  if (!ReadFull(fd, hello, sizeof hello, peer, hello_deadline).ok() ||
      !ParseHello(hello, &fields).ok()) {
    Refuse();  // not a ckpt peer, or not this version: nothing to answer
    ::shutdown(fd, SHUT_RDWR);
    return;
  }
  Key key;
  switch (FindKey(fields.id, fd, hello_deadline, &key)) {
    case Lookup::kKey:
      break;
    case Lookup::kRetry:  // its load is open here, its secret not yet known
      refuse(absl::StatusCode::kUnavailable, kRetry);
      return;
    case Lookup::kUnknown:
      refuse(absl::StatusCode::kPermissionDenied, 0);
      return;
    case Lookup::kHungUp:
      Refuse();
      ::shutdown(fd, SHUT_RDWR);
      return;
  }
  if (!HelloVerifies(hello, key) || !FirstSight(fields.id, fields.nonce)) {
    hellos_rejected_.fetch_add(1, std::memory_order_relaxed);
    refuse(absl::StatusCode::kPermissionDenied, 0);
    return;
  }
  hellos_verified_.fetch_add(1, std::memory_order_relaxed);
  std::shared_ptr<PeerTransfer> transfer = AwaitExpected(fields.id, key, fd);
  if (transfer == nullptr || !transfer->Claim(fd)) {
    refuse(absl::StatusCode::kPermissionDenied, 0);
    return;
  }
  Nonce own;
  FillRandom(own.data(), own.size());
  FrameMac session(SessionKey(key, fields.nonce, own));
  const bool frame_auth = options_.frame_auth;
  Send(fd, EncodeReady(session, kReady | (frame_auth ? kFrameAuth : 0), own), peer);
  SetTimeouts(fd, options_.idle_timeout, options_.idle_timeout);
  const std::string from = absl::StrCat(transfer->what_, " from ", peer);
  uint64_t received = 0;
  absl::Status status = ReceiveFrames(fd, *transfer, session, frame_auth, &received);
  if (!status.ok()) {
    status = absl::Status(status.code(), absl::StrCat(from, ": ", status.message()));
  }
  transfer->Finish(status);
  (status.ok() ? completed_ : failed_).fetch_add(1, std::memory_order_relaxed);
  if (!status.ok() && !transfer->cancelled()) {
    absl::FPrintF(stderr, "ckptd: peer channel: %s\n", status.ToString());
  }
  Send(fd, EncodeAck(session, received, status.code()), peer);
  // The peer sees the end now; the descriptor closes when the thread is
  // reaped.
  ::shutdown(fd, SHUT_RDWR);
}

absl::Status PeerReceiver::ReceiveFrames(int fd, PeerTransfer& transfer, FrameMac& session,
                                         bool frame_auth, uint64_t* received) {
  uint64_t next_offset = 0;  // frames come in order
  for (uint64_t frame = 0;; ++frame) {
    char header[kFrameHeaderBytes];
    if (absl::Status s = ReadFull(fd, header, sizeof header, "the sender"); !s.ok()) return s;
    const uint64_t offset = GetU64(header);
    const uint32_t length = GetU32(header + 8);
    const uint32_t flags = GetU32(header + 12);
    if (length > options_.max_frame_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("a frame of ", length, " bytes; the limit is ", options_.max_frame_bytes));
    }
    if (offset > transfer.bytes_ || length > transfer.bytes_ - offset) {
      return absl::InvalidArgumentError(absl::StrCat("a frame for [", offset, ", +", length,
                                                     ") of a transfer of ", transfer.bytes_,
                                                     " bytes"));
    }
    // Frames in order, none overlapping: with the total checked at the end,
    // every byte of the destination was then written exactly once.
    if (offset < next_offset) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a frame at offset ", offset, " before the end of the previous one (", next_offset, ")"));
    }
    next_offset = offset + length;
    char* const dst = transfer.base_ + offset;
    if (!frame_auth) {
      if (absl::Status s = ReadFull(fd, dst, length, "the sender"); !s.ok()) return s;
    } else {
      // MAC'd as it lands, while in the cache. The bytes are in the
      // destination before the MAC is checked: a frame that fails it
      // fails the transfer, so its owner never takes them.
      session.Begin(Direction::kSender, frame);
      session.Add(header, sizeof header);
      for (uint64_t done = 0; done < length;) {
        const uint64_t n = std::min<uint64_t>(kAuthChunkBytes, length - done);
        if (absl::Status s = ReadFull(fd, dst + done, n, "the sender"); !s.ok()) return s;
        session.Add(dst + done, n);
        done += n;
      }
      char tag[kTagBytes];
      if (absl::Status s = ReadFull(fd, tag, sizeof tag, "the sender"); !s.ok()) return s;
      const Tag expected = session.Finish();
      if (!ConstantTimeEquals(View(expected), View(tag, sizeof tag))) {
        return absl::DataLossError(
            absl::StrCat("frame ", frame, " for [", offset, ", +", length,
                         ") fails its authentication: altered on the way, or not from the "
                         "sender; the transfer's bytes are not to be used"));
      }
    }
    *received += length;
    transfer.received_.store(*received, std::memory_order_relaxed);
    bytes_received_.fetch_add(length, std::memory_order_relaxed);
    if (*received > transfer.bytes_) {
      return absl::InvalidArgumentError(
          absl::StrCat(*received, " bytes, more than the transfer's ", transfer.bytes_));
    }
    if ((flags & kLastFrame) != 0) {
      if (*received != transfer.bytes_) {
        return absl::DataLossError(
            absl::StrCat("the end after ", *received, " of ", transfer.bytes_, " bytes"));
      }
      return absl::OkStatus();
    }
  }
}

}  // namespace ckpt::peer
