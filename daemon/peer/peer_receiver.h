// The receiving end of the peer data channel (peer_wire.h): a TCP listener
// that writes each expected transfer's bytes straight into the memory its
// owner named (a pool room), one connection per transfer, no copy in
// between.
//
// A transfer is expected before its sender connects: Expect() returns the
// token (id and key) the control plane hands to the sending host, or takes
// one derived from a master secret. A connection that has not shown a
// hello whose MAC the transfer's key verifies within the hello timeout of
// its accept (a wrong magic or version, an unknown or used id, a wrong MAC,
// a replayed hello), or one over the limits (max_connections in all,
// max_connections_per_host from one remote address), is closed without
// touching any transfer (and counted): a host's connections never take
// another host's slots, and only a verified hello may wait longer (up to
// claim_timeout, for a transfer its open prefix will expect).
//
// Within a transfer, a frame whose MAC fails (frame_auth), outside the
// destination or longer than the frame limit, a peer that goes quiet past
// the idle timeout or closes early fails that transfer with a status
// naming it and the peer, and nothing else; no byte after it is taken.
// Bytes a failed transfer wrote into its destination are garbage: only a
// transfer whose Wait returned OK holds the sender's bytes.
//
// Thread-safety: all methods are safe from any thread. A thread per
// connection (at most max_connections).
#ifndef CKPT_DAEMON_PEER_PEER_RECEIVER_H_
#define CKPT_DAEMON_PEER_PEER_RECEIVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/peer/peer_crypto.h"
#include "daemon/peer/peer_wire.h"

namespace ckpt::peer {

struct PeerReceiverOptions {
  std::string listen_address = "0.0.0.0:0";
  uint32_t max_frame_bytes = 64u << 20;
  absl::Duration hello_timeout = absl::Seconds(5);
  absl::Duration idle_timeout = absl::Seconds(10);
  int max_connections = 64;
  absl::Duration claim_timeout = absl::Seconds(120);  // see OpenPrefix
  // Connections at once from one remote address; 0: a quarter of
  // max_connections (at least 1). A sender over it is closed unanswered
  // and comes back.
  int max_connections_per_host = 0;
  // Every frame carries a MAC (peer_wire.h). Off only on a data network no
  // one else can write to: the hello is checked either way.
  bool frame_auth = true;
};

struct PeerReceiverStats {
  uint64_t bytes_received = 0;
  uint64_t transfers_completed = 0;
  uint64_t transfers_failed = 0;
  uint64_t connections_refused = 0;  // no hello, bad hello, unknown token, too many
  uint64_t hellos_rejected = 0;      // of those: a hello whose MAC failed, or replayed
  uint64_t hellos_verified = 0;      // hellos that passed (then wait for or claim a transfer)
};

class PeerReceiver;

// One expected transfer. Its destination is written only between the
// sender's hello and the end of Wait (or Cancel): after either returns, no
// byte of it is touched again.
class PeerTransfer {
 public:
  const PeerToken& token() const { return token_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t received() const { return received_.load(std::memory_order_relaxed); }
  // A sender proved it holds the token (the transfer is its from then on).
  bool connected() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return claimed_;
  }
  // OK once every byte arrived and the sender ended the transfer; the
  // transfer's error otherwise. At the deadline the transfer is cancelled
  // (DEADLINE_EXCEEDED).
  absl::Status Wait(absl::Time deadline);
  // The same, asking `stop` now and then: true ends the wait at once with
  // CANCELLED (the transfer is cancelled), e.g. once its owner failed.
  absl::Status WaitUnless(absl::Time deadline, const std::function<bool()>& stop);
  // Whether the transfer ended (either way) by `deadline`; cancels nothing.
  bool AwaitDone(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // Fails the transfer (a sender still connected is cut off) and returns
  // once no thread writes into the destination.
  void Cancel(const absl::Status& why);

 private:
  friend class PeerReceiver;
  PeerTransfer(std::string what, char* base, uint64_t bytes, PeerToken token)
      : what_(std::move(what)), base_(base), bytes_(bytes), token_(token) {}
  // The connection's side: claim once, then report the end.
  bool Claim(int fd) ABSL_LOCKS_EXCLUDED(mu_);
  void Finish(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }

  const std::string what_;  // "load of job J step S from host H", for messages
  char* const base_;
  const uint64_t bytes_;
  const PeerToken token_;
  std::atomic<uint64_t> received_{0};
  std::atomic<bool> cancelled_{false};
  mutable absl::Mutex mu_;
  bool claimed_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;  // a connection may touch the destination
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

// What Expect hands the transfer's owner: the transfer, cancelled when the
// handle goes, so that no connection can write into a destination its
// owner has freed.
class ExpectedTransfer {
 public:
  explicit ExpectedTransfer(std::shared_ptr<PeerTransfer> transfer)
      : transfer_(std::move(transfer)) {}
  ExpectedTransfer(ExpectedTransfer&&) = default;
  ExpectedTransfer& operator=(ExpectedTransfer&&) = delete;
  ~ExpectedTransfer() {
    if (transfer_) transfer_->Cancel(absl::CancelledError("its owner gave the transfer up"));
  }
  PeerTransfer* operator->() const { return transfer_.get(); }

 private:
  std::shared_ptr<PeerTransfer> transfer_;
};

class PeerReceiver {
 public:
  static absl::StatusOr<std::unique_ptr<PeerReceiver>> Start(const PeerReceiverOptions& options);
  ~PeerReceiver();  // stops listening, cuts every connection, joins its threads
  PeerReceiver(const PeerReceiver&) = delete;
  PeerReceiver& operator=(const PeerReceiver&) = delete;

  int port() const { return port_; }
  // A transfer of exactly `bytes` into [base, base + bytes), from whoever
  // proves it holds the returned transfer's token (a random one). `what`
  // names it in errors.
  ExpectedTransfer Expect(std::string what, char* base, uint64_t bytes);
  // The same with a token the caller chose (a load spread over hosts
  // derives its transfers' tokens from what the coordinator sent every
  // host). Its id must be unique among the transfers expected.
  ExpectedTransfer Expect(std::string what, char* base, uint64_t bytes, const PeerToken& token);
  // While the returned handle lives, a sender of a transfer of the load or
  // save `id` (whose ids begin with it, peer_wire.h TransferToken) whose
  // hello verifies under `master_secret` waits up to claim_timeout for
  // its transfer to be expected, instead of being refused: the senders of
  // a load may be ahead of this host's readers. A hello that does not
  // verify is refused at once. A hello of no open prefix waits up to
  // hello_timeout (from its connection's accept) for its prefix to open or
  // its transfer to be expected, then is refused. An empty `master_secret`
  // (not known here yet): an early sender's hello cannot be checked, so one
  // not expected by its hello timeout is told to come back (kRetry).
  std::shared_ptr<void> OpenPrefix(uint64_t id, absl::string_view master_secret);
  PeerReceiverStats Stats() const;

 private:
  struct Connection {
    std::thread thread;
    std::atomic<bool> finished{false};
    int fd = -1;
    std::string host;  // the remote address, whose slots it takes
  };
  // An open load's or save's: how many handles hold it, its master secret
  // (empty: not given), and the verified hellos seen (id and nonce), each
  // good once.
  struct Prefix {
    int handles = 0;
    std::string secret;
    std::set<std::string> seen;
  };
  // What a hello's id leads to within its hello timeout.
  enum class Lookup { kKey, kRetry, kUnknown, kHungUp };
  PeerReceiver(const PeerReceiverOptions& options, int listener, int port);
  void AcceptLoop();
  void Serve(int fd, absl::Time accepted);
  std::shared_ptr<void> OpenPrefixBytes(std::string prefix, std::string secret);
  // The key to check a hello of transfer `id` with: its expected
  // transfer's, or derived from its open prefix's secret; waited for
  // until `deadline` (while the sender on `fd` is there).
  Lookup FindKey(const std::string& id, int fd, absl::Time deadline, Key* key);
  // False when the verified hello (id and nonce) was seen already.
  bool FirstSight(const std::string& id, const Nonce& nonce);
  // The transfer `id` once expected, removed from the expected ones (one
  // use), waiting up to claim_timeout while its prefix is open and the
  // sender on `fd` is there; null when none, or its key is not `key`.
  std::shared_ptr<PeerTransfer> AwaitExpected(const std::string& id, const Key& key, int fd);
  std::shared_ptr<PeerTransfer> TakeExpected(const std::string& id, const Key& key);
  // Reads the frames of `transfer` from `fd` into its destination.
  absl::Status ReceiveFrames(int fd, PeerTransfer& transfer, FrameMac& session, bool frame_auth,
                             uint64_t* received);
  void Refuse() { connections_refused_.fetch_add(1, std::memory_order_relaxed); }
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PeerReceiverOptions options_;
  const int per_host_limit_;  // options_.max_connections_per_host, or its default
  const int listener_;
  const int port_;
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> bytes_received_{0};
  std::atomic<uint64_t> completed_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> connections_refused_{0};
  std::atomic<uint64_t> hellos_rejected_{0};
  std::atomic<uint64_t> hellos_verified_{0};
  mutable absl::Mutex mu_;
  // By the token's id; weak: a transfer its owner dropped is not kept alive.
  std::map<std::string, std::weak_ptr<PeerTransfer>> expected_ ABSL_GUARDED_BY(mu_);
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Prefix> open_prefixes_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> connections_per_host_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ckpt::peer

#endif  // CKPT_DAEMON_PEER_PEER_RECEIVER_H_
