#include "daemon/tier/spread_verify.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/planning/manifest_io.h"
#include "daemon/planning/replica_placement.h"
#include "daemon/tier/erasure_code.h"
#include "daemon/tier/held_files_verify.h"

namespace ckpt::tier {
namespace {

// The host that wrote "data/<host>-<writer>.bin"; empty for another name.
std::string WriterOf(const std::string& file) {
  if (!absl::StartsWith(file, "data/")) return "";
  const size_t dash = file.rfind('-');
  if (dash == std::string::npos || dash <= 5) return "";
  return file.substr(5, dash - 5);
}

// Where each file of the step should be: file -> hosts.
std::map<std::string, std::set<std::string>> ExpectedHolders(
    const std::set<std::string>& files, const v1::ErasurePlan* stripes, int replicas,
    const std::map<std::string, std::string>& domains) {
  std::map<std::string, std::set<std::string>> expected;
  std::map<std::string, std::string> writers;  // the step's hosts, with their domains
  for (const std::string& file : files) {
    const std::string writer = WriterOf(file);
    if (writer.empty()) continue;
    expected[file].insert(writer);
    auto d = domains.find(writer);
    writers[writer] = d == domains.end() ? "" : d->second;
  }
  if (stripes != nullptr) {
    const int k = static_cast<int>(stripes->k());
    for (const v1::ErasureStripe& stripe : stripes->stripes()) {
      for (int i = k; i < stripe.shares_size(); ++i) {
        for (const v1::ReplicaFile& f : stripe.shares(i).files()) {
          expected[f.name()].insert(stripe.shares(i).host());
        }
      }
    }
    return expected;
  }
  const std::vector<std::string> ring = planning::RingOfHosts(writers);
  const int n = static_cast<int>(ring.size());
  std::map<std::string, std::vector<std::string>> copies_of;  // writer -> its replica hosts
  for (int i = 0; i < n; ++i) {
    for (int r = 1; r <= std::min(replicas, n - 1); ++r) {
      copies_of[ring[i]].push_back(ring[(i + r) % n]);
    }
  }
  for (auto& [file, holders] : expected) {
    for (const std::string& host : copies_of[WriterOf(file)]) holders.insert(host);
  }
  return expected;
}

const v1::ShareFold* FoldOf(const HostAnswer* answer, uint32_t stripe, uint32_t share) {
  if (answer == nullptr || !answer->reached) return nullptr;
  for (const v1::ShareFold& fold : answer->report.folds()) {
    if (fold.stripe() == stripe && fold.share() == share && fold.fold().size() == kFoldBytes) {
      return &fold;
    }
  }
  return nullptr;
}

}  // namespace

std::map<std::string, v1::VerifyOrder> VerifyOrders(uint64_t round, const std::string& job,
                                                    int64_t step,
                                                    const std::vector<std::string>& hosts,
                                                    const v1::ErasurePlan* stripes) {
  std::map<std::string, v1::VerifyOrder> orders;
  for (const std::string& host : hosts) {
    v1::VerifyOrder& order = orders[host];
    order.set_round(round);
    order.set_job(job);
    order.set_step(step);
  }
  if (stripes == nullptr) return orders;
  for (const v1::ErasureStripe& stripe : stripes->stripes()) {
    v1::ErasureStripe bare = stripe;
    for (v1::ErasureShare& share : *bare.mutable_shares()) share.clear_address();
    std::set<std::string> in_stripe;
    for (const v1::ErasureShare& share : stripe.shares()) in_stripe.insert(share.host());
    for (const std::string& host : in_stripe) {
      auto it = orders.find(host);
      if (it != orders.end()) *it->second.add_stripes() = bare;
    }
  }
  return orders;
}

SpreadVerdict JudgeSpreadVerify(const v1::CheckpointManifest& manifest,
                                const v1::ErasurePlan* stripes, int replicas,
                                const std::map<std::string, std::string>& domains,
                                const std::map<std::string, HostAnswer>& answers) {
  SpreadVerdict verdict;
  std::set<std::string> files;
  (void)planning::ForEachChunk(manifest, [&](const v1::StoredChunk& chunk, const std::string&) {
    files.insert(chunk.file());
    return absl::OkStatus();
  });
  const std::map<std::string, std::set<std::string>> expected =
      ExpectedHolders(files, stripes, replicas, domains);
  // What each host that answered holds: file -> verdict.
  std::map<std::string, std::map<std::string, const v1::FileVerdict*>> held;
  for (const auto& [host, answer] : answers) {
    if (!answer.reached) continue;
    auto& mine = held[host];
    for (const v1::FileVerdict& f : answer.report.files()) mine[f.file()] = &f;
    if (!answer.report.error().empty()) {
      verdict.problems.push_back(absl::StrCat("host ", host, ": ", answer.report.error()));
    }
  }
  // Hosts that should hold copies and could not be asked or did not answer.
  std::map<std::string, int> unreached;
  for (const auto& [file, holders] : expected) {
    for (const std::string& host : holders) {
      auto answer = answers.find(host);
      if (answer == answers.end() || !answer->second.reached) {
        ++unreached[host];
        continue;
      }
      const auto& mine = held[host];
      if (!mine.contains(file)) {
        verdict.problems.push_back(
            absl::StrCat("host ", host, ": ", file, ": missing from host ", host));
      }
    }
  }
  for (const auto& [host, count] : unreached) {
    auto answer = answers.find(host);
    const std::string why =
        answer == answers.end() ? "not registered, or lost" : answer->second.why;
    verdict.problems.push_back(absl::StrCat("host ", host, ": unreachable (", why, "): its ", count,
                                            " file(s) of the step are not verified"));
  }
  std::map<std::string, v1::VerifyCheckpointResponse::HostCopies> copies;
  for (const auto& [host, mine] : held) {
    for (const auto& [file, f] : mine) {
      if (f->state() == v1::FileVerdict::FILE_OK) {
        v1::VerifyCheckpointResponse::HostCopies& c = copies[host];
        c.set_host(host);
        c.set_files(c.files() + 1);
        c.set_chunks(c.chunks() + f->chunks());
        c.set_bytes(c.bytes() + f->bytes());
        verdict.chunks += f->chunks();
        verdict.bytes += f->chunks() > 0 ? f->bytes() : 0;
        continue;
      }
      const char* state = f->state() == v1::FileVerdict::FILE_CORRUPT ? "corrupt" : "unreadable";
      verdict.problems.push_back(
          absl::StrCat("host ", host, ": ", file, ": ", state, ": ", f->detail()));
    }
  }
  if (stripes != nullptr) {
    absl::StatusOr<ErasureCode> code =
        ErasureCode::Create(static_cast<int>(stripes->k()), static_cast<int>(stripes->m()));
    for (const v1::ErasureStripe& stripe : stripes->stripes()) {
      if (!code.ok() || stripe.shares_size() != code->k() + code->m()) {
        verdict.problems.push_back(
            absl::StrCat("stripe ", stripe.number(), " of the step's ERASURE file is malformed"));
        break;
      }
      // The data shares' folds, each from a host whose files of it are OK.
      std::vector<std::string> data(code->k(), std::string(kFoldBytes, '\0'));
      bool complete = true;
      for (int t = 0; t < code->k() && complete; ++t) {
        const v1::ErasureShare& share = stripe.shares(t);
        if (share.bytes() == 0) continue;
        auto answer = answers.find(share.host());
        const v1::ShareFold* fold =
            FoldOf(answer == answers.end() ? nullptr : &answer->second, stripe.number(), t);
        complete = fold != nullptr;
        for (const v1::ReplicaFile& f : share.files()) {
          auto it = held[share.host()].find(f.name());
          complete = complete && it != held[share.host()].end() &&
                     it->second->state() == v1::FileVerdict::FILE_OK;
        }
        if (complete) data[t] = fold->fold();
      }
      // A stripe with a data share lost or bad: that is named above.
      if (!complete) continue;
      std::vector<std::string> parity(code->m(), std::string(kFoldBytes, '\0'));
      std::vector<const uint8_t*> in;
      std::vector<uint8_t*> out;
      for (std::string& d : data) in.push_back(reinterpret_cast<const uint8_t*>(d.data()));
      for (std::string& p : parity) out.push_back(reinterpret_cast<uint8_t*>(p.data()));
      if (!code->Encode(in, out, kFoldBytes).ok()) continue;
      for (int j = 0; j < code->m(); ++j) {
        const v1::ErasureShare& share = stripe.shares(code->k() + j);
        auto answer = answers.find(share.host());
        const v1::ShareFold* fold = FoldOf(answer == answers.end() ? nullptr : &answer->second,
                                           stripe.number(), code->k() + j);
        if (fold == nullptr) continue;  // missing or unreached: named above
        const std::string name =
            share.files_size() > 0 ? share.files(0).name() : absl::StrCat("parity share ", j);
        if (fold->fold() != parity[j]) {
          verdict.problems.push_back(absl::StrCat("host ", share.host(), ": ", name,
                                                  ": corrupt: does not match the data of stripe ",
                                                  stripe.number(), " (its parity check fails)"));
          continue;
        }
        copies[share.host()].set_parity_shares(copies[share.host()].parity_shares() + 1);
      }
    }
  }
  for (auto& [host, c] : copies) {
    c.set_host(host);
    verdict.hosts.push_back(std::move(c));
  }
  return verdict;
}

}  // namespace ckpt::tier
