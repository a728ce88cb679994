// ckpt-peer-bench: the peer data channel against the link (issue "Many
// hosts"). Two "hosts", each a network namespace joined by a veth pair (or,
// with --loopback or without root, two processes on 127.0.0.1), move the
// same bytes four ways: a raw TCP stream of the bytes alone (what iperf3
// measures: the link's limit), the peer data channel (daemon/peer: TCP
// with a MAC'd hello and frame headers, into the receiver's memory) with
// every frame MAC'd (ckptd's default, --peer_frame_auth) and without,
// and a streaming gRPC call of PeerBlock messages
// (proto/ckpt/v1/peer.proto), the alternative the channel was measured
// against. Every receiver puts every byte into a destination buffer, as a
// daemon would into its pool. Rounds run the four in rotating order; the
// figures are medians.
//
//   ckpt-peer-bench [--gib 2] [--block-mib 4] [--rounds 3] [--loopback] [--json]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <CLI/CLI.hpp>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "ckpt/v1/peer.grpc.pb.h"
#include "daemon/peer/peer_receiver.h"
#include "daemon/peer/peer_sender.h"
#include "proto/lib/hex.h"
#include "proto/lib/status_context.h"
#include "tools/bench/child_process.h"
#include "tools/bench/median.h"

namespace ckpt::bench {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kDestinationBytes = 256 * kMiB;  // the receiver's "pool", reused

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool SendAll(int fd, const char* p, uint64_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<uint64_t>(k);
  }
  return true;
}

bool RecvAll(int fd, char* p, uint64_t n) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<uint64_t>(k);
  }
  return true;
}

// ---- the receiving host ----------------------------------------------------

class PeerSink final : public v1::PeerData::Service {
 public:
  PeerSink(char* destination, uint64_t size) : destination_(destination), size_(size) {}
  grpc::Status Push(grpc::ServerContext*, grpc::ServerReader<v1::PeerBlock>* reader,
                    v1::PeerReceipt* receipt) override {
    v1::PeerBlock block;
    while (reader->Read(&block)) {
      const std::string& data = block.data();
      if (data.size() > size_) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "block larger than the buffer");
      }
      const uint64_t at = block.offset() % (size_ - data.size() + 1);
      std::memcpy(destination_ + at, data.data(), data.size());  // the delivery
      receipt->set_blocks(receipt->blocks() + 1);
      receipt->set_bytes(receipt->bytes() + data.size());
    }
    return grpc::Status::OK;
  }

 private:
  char* const destination_;
  const uint64_t size_;
};

// Raw TCP: an 8-byte length, the bytes straight into the destination, an
// 8-byte acknowledgement once all arrived.
void ServeRawTcp(int listener, char* destination, uint64_t size) {
  for (;;) {
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) return;
    uint64_t total = 0;
    if (RecvAll(fd, reinterpret_cast<char*>(&total), sizeof total)) {
      uint64_t done = 0;
      bool ok = true;
      while (ok && done < total) {
        const uint64_t at = done % size;
        const uint64_t n = std::min(total - done, size - at);
        ok = RecvAll(fd, destination + at, n);
        done += n;
      }
      if (ok) (void)SendAll(fd, reinterpret_cast<const char*>(&done), sizeof done);
    }
    ::close(fd);
  }
}

int RunReceiver(const std::string& host, int tcp_port, int grpc_port, uint64_t bytes) {
  std::vector<char> destination(std::max(bytes, kDestinationBytes));
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(tcp_port));
  ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener, 4) != 0) {
    const int error = errno;
    std::cout << "error raw TCP listen on " << host << ":" << tcp_port << ": "
              << ErrnoMessage(error) << std::endl;
    return 1;
  }
  std::thread raw([&] { ServeRawTcp(listener, destination.data(), destination.size()); });
  raw.detach();
  PeerSink sink(destination.data(), destination.size());
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(host, ":", grpc_port), grpc::InsecureServerCredentials());
  builder.SetMaxReceiveMessageSize(64 * static_cast<int>(kMiB));
  builder.RegisterService(&sink);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    std::cout << "error gRPC listen on " << host << ":" << grpc_port << std::endl;
    return 1;
  }
  // Two channels: every frame MAC'd (ckptd's default), and not.
  auto authenticated =
      peer::PeerReceiver::Start({.listen_address = absl::StrCat(host, ":0"), .frame_auth = true});
  auto plain =
      peer::PeerReceiver::Start({.listen_address = absl::StrCat(host, ":0"), .frame_auth = false});
  if (!authenticated.ok() || !plain.ok()) {
    std::cout << "error " << (authenticated.ok() ? plain.status() : authenticated.status())
              << std::endl;
    return 1;
  }
  std::cout << "ready" << std::endl;
  // "expect N auth|plain": a transfer of N bytes on that peer channel,
  // answered with its port and token; "wait": its outcome. EOF stops.
  std::optional<peer::ExpectedTransfer> transfer;
  for (std::string line; std::getline(std::cin, line);) {
    const std::vector<std::string> words = absl::StrSplit(line, ' ');
    uint64_t n = 0;
    if (words.size() == 3 && words[0] == "expect" && absl::SimpleAtoi(words[1], &n) &&
        n <= destination.size() && (words[2] == "auth" || words[2] == "plain")) {
      peer::PeerReceiver& channel = words[2] == "auth" ? **authenticated : **plain;
      transfer.reset();
      transfer.emplace(channel.Expect("bench transfer", destination.data(), n));
      const peer::PeerToken& token = (*transfer)->token();
      std::cout << "ok " << channel.port() << " "
                << absl::BytesToHexString(absl::StrCat(token.id(), peer::View(token.key)))
                << std::endl;
    } else if (line == "wait" && transfer.has_value()) {
      const absl::Status s = (*transfer)->Wait(absl::Now() + absl::Minutes(1));
      std::cout << (s.ok() ? std::string("ok 0") : absl::StrCat("error ", s.ToString()))
                << std::endl;
    } else {
      std::cout << "error bad command " << line << std::endl;
    }
  }
  server->Shutdown();
  return 0;
}

// ---- the sending host ------------------------------------------------------

absl::StatusOr<double> SendRawTcp(const std::string& host, int port, uint64_t bytes,
                                  const std::vector<char>& block) {
  const auto start = std::chrono::steady_clock::now();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int e = errno;
    ::close(fd);
    // UNAVAILABLE whatever the errno: the receiver cannot be reached.
    return absl::UnavailableError(absl::StrCat("connect ", host, ":", port, ": ", ErrnoMessage(e)));
  }
  bool ok = SendAll(fd, reinterpret_cast<const char*>(&bytes), sizeof bytes);
  for (uint64_t sent = 0; ok && sent < bytes; sent += block.size()) {
    ok = SendAll(fd, block.data(), std::min<uint64_t>(block.size(), bytes - sent));
  }
  uint64_t acked = 0;
  ok = ok && RecvAll(fd, reinterpret_cast<char*>(&acked), sizeof acked) && acked == bytes;
  ::close(fd);
  if (!ok) return absl::DataLossError("raw TCP transfer broke off");
  return Since(start);
}

absl::StatusOr<double> SendGrpc(v1::PeerData::Stub& stub, uint64_t bytes,
                                const std::vector<char>& block) {
  const auto start = std::chrono::steady_clock::now();
  grpc::ClientContext context;
  v1::PeerReceipt receipt;
  std::unique_ptr<grpc::ClientWriter<v1::PeerBlock>> writer = stub.Push(&context, &receipt);
  v1::PeerBlock message;
  message.set_transfer_id("bench");
  bool ok = true;
  for (uint64_t sent = 0; ok && sent < bytes; sent += block.size()) {
    message.set_offset(sent);
    // The copy out of the pool a daemon's gRPC sender makes as well.
    message.set_data(block.data(), std::min<uint64_t>(block.size(), bytes - sent));
    ok = writer->Write(message);
  }
  (void)writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return absl::DataLossError(absl::StrCat("gRPC: ", status.error_message()));
  if (receipt.bytes() != bytes) return absl::DataLossError("gRPC receipt short");
  return Since(start);
}

absl::StatusOr<double> SendChannel(const std::string& address, const std::string& token_bytes,
                                   uint64_t bytes, const std::vector<char>& block) {
  peer::PeerToken token;
  std::memcpy(token.id_bytes.data(), token_bytes.data(), peer::kIdBytes);
  std::memcpy(token.key.data(), token_bytes.data() + peer::kIdBytes, peer::kKeyBytes);
  std::vector<peer::PeerBlockRef> blocks;
  for (uint64_t sent = 0; sent < bytes; sent += block.size()) {
    blocks.push_back({sent, block.data(), std::min<uint64_t>(block.size(), bytes - sent)});
  }
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = peer::PeerSend(address, token, blocks); !s.ok()) return s;
  return Since(start);
}

int RunSender(const std::string& host, int tcp_port, int grpc_port, uint64_t block_bytes) {
  std::vector<char> block(block_bytes);
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(i * 131 + 7);
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 * static_cast<int>(kMiB));
  auto channel = grpc::CreateCustomChannel(absl::StrCat(host, ":", grpc_port),
                                           grpc::InsecureChannelCredentials(), args);
  auto stub = v1::PeerData::NewStub(channel);
  std::cout << "ready" << std::endl;
  for (std::string line; std::getline(std::cin, line);) {
    // "tcp N", "grpc N" or "channel N PORT TOKEN" (TOKEN: the id and key in hex)
    const std::vector<std::string> words = absl::StrSplit(line, ' ');
    uint64_t bytes = 0;
    if (words.size() < 2 || !absl::SimpleAtoi(words[1], &bytes)) {
      std::cout << "error bad command " << line << std::endl;
      continue;
    }
    const std::string& way = words[0];
    absl::StatusOr<double> seconds;
    if (way == "tcp") {
      seconds = SendRawTcp(host, tcp_port, bytes, block);
    } else if (way == "grpc") {
      seconds = SendGrpc(*stub, bytes, block);
    } else {
      int port = 0;
      const std::string token = words.size() == 4 ? DecodeHex(words[3]).value_or("") : "";
      if (token.size() != peer::kIdBytes + peer::kKeyBytes || !absl::SimpleAtoi(words[2], &port)) {
        std::cout << "error bad command " << line << std::endl;
        continue;
      }
      seconds = SendChannel(absl::StrCat(host, ":", port), token, bytes, block);
    }
    if (seconds.ok()) {
      std::cout << "ok " << *seconds << std::endl;
    } else {
      std::cout << "error " << seconds.status().message() << std::endl;
    }
  }
  return 0;
}

// ---- the two hosts ---------------------------------------------------------

// posix_spawn does not search PATH.
std::string IpPath() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "ip";
}

int Sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

// Two namespaces joined by a veth pair, 10.231.x.1 and .2; removed with
// the namespaces (the veth goes with them).
class NetnsPair {
 public:
  static std::unique_ptr<NetnsPair> Create() {
    auto pair = std::unique_ptr<NetnsPair>(new NetnsPair());
    const std::string a = pair->a_, b = pair->b_;
    const std::string va = absl::StrCat("cpb", getpid() % 100000, "a");
    const std::string vb = absl::StrCat("cpb", getpid() % 100000, "b");
    const int net = 1 + getpid() % 250;
    pair->address_a_ = absl::StrCat("10.231.", net, ".1");
    pair->address_b_ = absl::StrCat("10.231.", net, ".2");
    const std::string steps[] = {
        "ip netns add " + a,
        "ip netns add " + b,
        absl::StrCat("ip link add ", va, " netns ", a, " type veth peer name ", vb, " netns ", b),
        absl::StrCat("ip -n ", a, " addr add ", pair->address_a_, "/24 dev ", va),
        absl::StrCat("ip -n ", b, " addr add ", pair->address_b_, "/24 dev ", vb),
        absl::StrCat("ip -n ", a, " link set ", va, " up"),
        absl::StrCat("ip -n ", b, " link set ", vb, " up"),
        absl::StrCat("ip -n ", a, " link set lo up"),
        absl::StrCat("ip -n ", b, " link set lo up"),
    };
    for (const std::string& step : steps) {
      if (Sh(step) != 0) {
        absl::FPrintF(stderr, "ckpt-peer-bench: %s failed\n", step);
        return nullptr;
      }
    }
    return pair;
  }
  ~NetnsPair() {
    Sh("ip netns del " + a_);
    Sh("ip netns del " + b_);
  }
  std::vector<std::string> In(bool sender_side, std::vector<std::string> argv) const {
    argv.insert(argv.begin(), {IpPath(), "netns", "exec", sender_side ? a_ : b_});
    return argv;
  }
  const std::string& receiver_address() const { return address_b_; }

 private:
  NetnsPair()
      : a_(absl::StrCat("ckpt-pb-", getpid(), "-a")),
        b_(absl::StrCat("ckpt-pb-", getpid(), "-b")) {}
  const std::string a_, b_;
  std::string address_a_, address_b_;
};

struct Config {
  double gib = 2;
  int block_mib = 4;
  int rounds = 3;
  bool loopback = false;
  bool json = false;
};

// Sends `command`, returns what follows "ok " in the answer.
absl::StatusOr<std::string> Ask(ChildProcess& child, const std::string& command) {
  if (absl::Status s = child.Send(command); !s.ok()) return s;
  absl::StatusOr<std::string> line = child.ReadLine();
  if (!line.ok()) return line.status();
  if (line->rfind("ok ", 0) != 0) return absl::InternalError(absl::StrCat(command, ": ", *line));
  return line->substr(3);
}

absl::StatusOr<double> Run(ChildProcess& sender, ChildProcess& receiver, const std::string& way,
                           uint64_t bytes) {
  // "channel" MACs every frame, "channel_plain" does not: the sender does
  // as the receiver's Ready says.
  const bool channel = way == "channel" || way == "channel_plain";
  std::string command = absl::StrCat(channel ? "channel" : way, " ", bytes);
  if (channel) {
    absl::StatusOr<std::string> expected =
        Ask(receiver, absl::StrCat("expect ", bytes, way == "channel" ? " auth" : " plain"));
    if (!expected.ok()) return expected.status();
    absl::StrAppend(&command, " ", *expected);  // port and token
  }
  absl::StatusOr<std::string> answer = Ask(sender, command);
  if (!answer.ok()) return answer.status();
  if (channel) {
    if (absl::StatusOr<std::string> done = Ask(receiver, "wait"); !done.ok()) return done.status();
  }
  double seconds = 0;
  if (!absl::SimpleAtod(*answer, &seconds)) return absl::InternalError(*answer);
  return seconds;
}

int Main(const Config& c) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const bool namespaces = !c.loopback && geteuid() == 0 && Sh("ip netns list") == 0;
  std::unique_ptr<NetnsPair> hosts = namespaces ? NetnsPair::Create() : nullptr;
  if (namespaces && hosts == nullptr) return 1;
  const std::string address = hosts ? hosts->receiver_address() : "127.0.0.1";
  const int tcp_port = 20000 + getpid() % 20000, grpc_port = tcp_port + 1;
  auto wrap = [&](bool sender_side, std::vector<std::string> argv) {
    return hosts ? hosts->In(sender_side, std::move(argv)) : argv;
  };
  auto receiver = ChildProcess::Start(
      wrap(false, {self, "--receiver", "--host", address, "--tcp-port", std::to_string(tcp_port),
                   "--grpc-port", std::to_string(grpc_port), "--gib", std::to_string(c.gib)}),
      /*merge_stderr=*/false);
  if (!receiver.ok() || !(*receiver)->WaitFor("ready").ok()) {
    absl::FPrintF(stderr, "ckpt-peer-bench: the receiver did not start\n");
    return 1;
  }
  auto sender = ChildProcess::Start(
      wrap(true,
           {self, "--sender", "--host", address, "--tcp-port", std::to_string(tcp_port),
            "--grpc-port", std::to_string(grpc_port), "--block-mib", std::to_string(c.block_mib)}),
      /*merge_stderr=*/false);
  if (!sender.ok() || !(*sender)->WaitFor("ready").ok()) {
    absl::FPrintF(stderr, "ckpt-peer-bench: the sender did not start\n");
    return 1;
  }
  const uint64_t bytes = static_cast<uint64_t>(c.gib * (1ull << 30));
  absl::FPrintF(stderr, "ckpt-peer-bench: %.2f GiB per transfer, %d MiB blocks, %s\n", c.gib,
                c.block_mib,
                hosts ? absl::StrCat("two network namespaces over a veth pair, to ", address)
                      : std::string("loopback (127.0.0.1)"));
  // One unmeasured round of each first: connections, TCP windows, buffers.
  const char* ways[] = {"tcp", "channel", "channel_plain", "grpc"};
  constexpr int kWays = sizeof ways / sizeof ways[0];
  for (const char* way : ways) (void)Run(**sender, **receiver, way, 64 * kMiB);
  // Each round runs every way, in an order that rotates.
  std::map<std::string, std::vector<double>> gbps;
  for (int k = 0; k < c.rounds; ++k) {
    std::string line = absl::StrFormat("ckpt-peer-bench: round %d:", k);
    for (int i = 0; i < kWays; ++i) {
      const char* way = ways[(i + k) % kWays];
      absl::StatusOr<double> seconds = Run(**sender, **receiver, way, bytes);
      if (!seconds.ok()) {
        absl::FPrintF(stderr, "ckpt-peer-bench: %s: %s\n", way, seconds.status().ToString());
        return 1;
      }
      gbps[way].push_back(bytes / *seconds / 1e9);
      absl::StrAppendFormat(&line, " %s %.3f GB/s", way, gbps[way].back());
    }
    absl::FPrintF(stderr, "%s\n", line);
  }
  (void)(*sender)->Stop();
  (void)(*receiver)->Stop();
  const double tcp_gbps = Median(gbps["tcp"]), auth_gbps = Median(gbps["channel"]),
               plain_gbps = Median(gbps["channel_plain"]), grpc_gbps = Median(gbps["grpc"]);
  absl::PrintF(
      "  raw_tcp_gbps                 %8.3f\n  peer_channel_gbps            %8.3f  (frame MACs)\n"
      "  peer_channel_plain_gbps      %8.3f\n  grpc_stream_gbps             %8.3f\n",
      tcp_gbps, auth_gbps, plain_gbps, grpc_gbps);
  absl::PrintF("  peer_channel / raw_tcp       %8.3f  (frame MACs; goal >= 0.80)  %s\n",
               auth_gbps / tcp_gbps, auth_gbps / tcp_gbps >= 0.8 ? "ok" : "MISSED");
  absl::PrintF("  peer_channel_plain / raw_tcp %8.3f  (--peer_frame_auth=false)\n",
               plain_gbps / tcp_gbps);
  absl::PrintF("  grpc_stream / raw_tcp        %8.3f  (the alternative not taken)\n",
               grpc_gbps / tcp_gbps);
  if (c.json) {
    absl::PrintF(
        "{\"gib\":%.3f,\"block_mib\":%d,\"rounds\":%d,\"namespaces\":%s,\"raw_tcp_gbps\":%.4f,"
        "\"peer_channel_gbps\":%.4f,\"peer_channel_plain_gbps\":%.4f,\"grpc_stream_gbps\":%.4f,"
        "\"channel_over_raw_tcp\":%.4f,\"channel_plain_over_raw_tcp\":%.4f,"
        "\"grpc_over_raw_tcp\":%.4f}\n",
        c.gib, c.block_mib, c.rounds, hosts ? "true" : "false", tcp_gbps, auth_gbps, plain_gbps,
        grpc_gbps, auth_gbps / tcp_gbps, plain_gbps / tcp_gbps, grpc_gbps / tcp_gbps);
  }
  return 0;
}

}  // namespace
}  // namespace ckpt::bench

int main(int argc, char** argv) {
  CLI::App app{"ckpt-peer-bench: the peer data channel against raw TCP on the same link"};
  ckpt::bench::Config c;
  bool receiver = false, sender = false;
  std::string host = "127.0.0.1";
  int tcp_port = 0, grpc_port = 0;
  app.add_option("--gib", c.gib, "GiB per transfer")->capture_default_str();
  app.add_option("--block-mib", c.block_mib, "MiB per message or send")->capture_default_str();
  app.add_option("--rounds", c.rounds,
                 "Measured rounds (raw TCP, peer channel with and without frame MACs, gRPC each)")
      ->capture_default_str();
  app.add_flag("--loopback", c.loopback, "Two processes on 127.0.0.1, no namespaces");
  app.add_flag("--json", c.json, "Also print one JSON line");
  // Internal: the two hosts' processes.
  app.add_flag("--receiver", receiver)->group("");
  app.add_flag("--sender", sender)->group("");
  app.add_option("--host", host)->group("");
  app.add_option("--tcp-port", tcp_port)->group("");
  app.add_option("--grpc-port", grpc_port)->group("");
  CLI11_PARSE(app, argc, argv);
  if (c.gib <= 0 || c.block_mib < 1 || c.block_mib > 32 || c.rounds < 1) {
    std::fprintf(stderr,
                 "ckpt-peer-bench: --gib and --rounds must be positive, --block-mib 1-32\n");
    return 2;
  }
  if (receiver) {
    return ckpt::bench::RunReceiver(host, tcp_port, grpc_port,
                                    static_cast<uint64_t>(c.gib * (1ull << 30)));
  }
  if (sender) {
    return ckpt::bench::RunSender(host, tcp_port, grpc_port, uint64_t(c.block_mib) << 20);
  }
  return ckpt::bench::Main(c);
}
