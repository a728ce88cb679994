// The receiving end of the peer data channel (peer_wire.h): a TCP listener
// that writes each expected transfer's bytes straight into the memory its
// owner named (a pool room), one connection per transfer, no copy in
// between.
//
// A transfer is expected before its sender connects: Expect() returns the
// token the control plane hands to the sending host. A connection with no
// hello within --peer_hello_timeout, a wrong magic or version, an unknown,
// used or wrong token, or too many connections at once is closed without
// touching any transfer (and counted). Within a transfer, a frame outside
// the destination or longer than the frame limit, a peer that goes quiet
// past the idle timeout or closes early fails that transfer with a status
// naming the peer, and nothing else.
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
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/peer/peer_wire.h"

namespace ckpt::peer {

struct PeerReceiverOptions {
  std::string listen_address = "0.0.0.0:0";
  uint32_t max_frame_bytes = 64u << 20;
  absl::Duration hello_timeout = absl::Seconds(5);
  absl::Duration idle_timeout = absl::Seconds(10);
  int max_connections = 64;
  absl::Duration claim_timeout = absl::Seconds(120);  // see OpenPrefix
};

struct PeerReceiverStats {
  uint64_t bytes_received = 0;
  uint64_t transfers_completed = 0;
  uint64_t transfers_failed = 0;
  uint64_t connections_refused = 0;  // no hello, bad hello, unknown token, too many
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
  // A sender presented the token (the transfer is its from then on).
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
  // presents the returned transfer's token. `what` names it in errors.
  ExpectedTransfer Expect(std::string what, char* base, uint64_t bytes);
  // The same with a token the caller chose (a load spread over hosts
  // derives its transfers' tokens from what the coordinator sent every
  // host). Its id must be unique among the transfers expected.
  ExpectedTransfer Expect(std::string what, char* base, uint64_t bytes, const PeerToken& token);
  // While the returned handle lives, a sender whose token begins with
  // `prefix` (kTokenPrefixBytes) but is not expected yet waits up to
  // claim_timeout for it, instead of being refused: the senders of a load
  // may be ahead of this host's readers. A token of no open prefix waits
  // up to hello_timeout for its prefix to open, then is refused.
  std::shared_ptr<void> OpenPrefix(std::string prefix);
  // The same for the tokens of one load or save: those whose first 8 bytes
  // are `id` (peer_wire.h TransferToken).
  std::shared_ptr<void> OpenPrefix(uint64_t id);
  PeerReceiverStats Stats() const;

 private:
  struct Connection {
    std::thread thread;
    std::atomic<bool> finished{false};
    int fd = -1;
  };
  PeerReceiver(const PeerReceiverOptions& options, int listener, int port)
      : options_(options), listener_(listener), port_(port) {}
  void AcceptLoop();
  void Serve(int fd);
  // The transfer a hello names, removed from the expected ones; null (and
  // counted) when none matches.
  std::shared_ptr<PeerTransfer> TakeExpected(const PeerToken& token);
  // The same, waiting up to claim_timeout while the token's prefix is open
  // (and while the sender on `fd` has not hung up).
  std::shared_ptr<PeerTransfer> AwaitExpected(const PeerToken& token, int fd);
  void Refuse() { connections_refused_.fetch_add(1, std::memory_order_relaxed); }
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PeerReceiverOptions options_;
  const int listener_;
  const int port_;
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> bytes_received_{0};
  std::atomic<uint64_t> completed_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> connections_refused_{0};
  mutable absl::Mutex mu_;
  // By the token's id; weak: a transfer its owner dropped is not kept alive.
  std::map<std::string, std::weak_ptr<PeerTransfer>> expected_ ABSL_GUARDED_BY(mu_);
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> open_prefixes_ ABSL_GUARDED_BY(mu_);  // handles alive per prefix
};

}  // namespace ckpt::peer

#endif  // CKPT_DAEMON_PEER_PEER_RECEIVER_H_
