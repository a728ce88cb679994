// Blocking TCP sockets for the peer data channel: every call has a bound
// (socket timeouts), every error names the peer.
#ifndef CKPT_DAEMON_PEER_PEER_SOCKET_H_
#define CKPT_DAEMON_PEER_PEER_SOCKET_H_

#include <sys/uio.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace ckpt::peer {

// "host:port" or "[v6]:port"; port 0 picks one (then *port says which).
absl::StatusOr<int> ListenTcp(const std::string& address, int* port);
absl::StatusOr<int> ConnectTcp(const std::string& address, absl::Duration timeout);
// How long a read or write may block before it fails (DEADLINE_EXCEEDED).
void SetTimeouts(int fd, absl::Duration receive, absl::Duration send);
// "10.0.0.2:41234", or "an unknown peer".
std::string PeerName(int fd);
// The remote address alone ("10.0.0.2", "::1"): the host whose connection
// slots this one takes. Empty when unknown.
std::string RemoteHost(int fd);

// All n bytes, or an error: UNAVAILABLE when the peer closed or reset the
// connection, DEADLINE_EXCEEDED when it went quiet past the timeout, or
// when `deadline` passed (a bound on the whole read: a peer dripping one
// byte at a time would otherwise reset the socket timeout with each).
absl::Status ReadFull(int fd, char* p, uint64_t n, const std::string& peer,
                      absl::Time deadline = absl::InfiniteFuture());
// All of the iovecs (advanced in place), or an error as above.
absl::Status WriteFull(int fd, iovec* iov, int count, const std::string& peer);
// Sends `length` bytes of `file` from `offset` (sendfile: the kernel takes
// the file's pages, no copy through this process's memory): UNAVAILABLE
// when the peer closed, DEADLINE_EXCEEDED as WriteFull, DATA_LOSS when the
// file could not give its bytes (shorter than it says, or an I/O error).
absl::Status SendFileFull(int fd, int file, uint64_t offset, uint64_t length,
                          const std::string& peer);

}  // namespace ckpt::peer

#endif  // CKPT_DAEMON_PEER_PEER_SOCKET_H_
