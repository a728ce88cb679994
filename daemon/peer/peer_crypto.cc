#include "daemon/peer/peer_crypto.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace ckpt::peer {
namespace {

// OpenSSL fails these calls only when out of memory or given a bad
// parameter, neither of which a caller could handle: the daemon stops
// rather than send or accept bytes it did not authenticate.
void Require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "ckptd: peer channel: %s failed (OpenSSL)\n", what);
  std::abort();
}

}  // namespace

Key Hmac(absl::string_view key, absl::string_view label, absl::string_view data) {
  const std::string message = absl::StrCat(label, data);
  Key out{};
  unsigned int length = 0;
  Require(HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
               reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(),
               &length) != nullptr &&
              length == out.size(),
          "HMAC-SHA256");
  return out;
}

Key TransferKey(absl::string_view master_secret, absl::string_view transfer_id) {
  return Hmac(master_secret, "ckpt-peer v3 transfer key", transfer_id);
}

Key SessionKey(const Key& transfer_key, const Nonce& sender, const Nonce& receiver) {
  return Hmac(View(transfer_key), "ckpt-peer v3 session key",
              absl::StrCat(View(sender), View(receiver)));
}

struct FrameMac::Context {
  EVP_CIPHER_CTX* cipher = nullptr;
};

FrameMac::FrameMac(const Key& session_key) : context_(new Context) {
  context_->cipher = EVP_CIPHER_CTX_new();
  Require(context_->cipher != nullptr, "EVP_CIPHER_CTX_new");
  Require(EVP_EncryptInit_ex(context_->cipher, EVP_aes_256_gcm(), nullptr, session_key.data(),
                             nullptr) == 1,
          "AES-256-GCM key setup");
}

FrameMac::~FrameMac() { EVP_CIPHER_CTX_free(context_->cipher); }

void FrameMac::Begin(Direction direction, uint64_t counter) {
  // 12 bytes, GCM's own IV size: who speaks, then the message's number.
  unsigned char iv[12];
  const uint32_t d = static_cast<uint32_t>(direction);
  for (int i = 0; i < 4; ++i) iv[i] = static_cast<unsigned char>(d >> (8 * i));
  for (int i = 0; i < 8; ++i) iv[4 + i] = static_cast<unsigned char>(counter >> (8 * i));
  Require(EVP_EncryptInit_ex(context_->cipher, nullptr, nullptr, nullptr, iv) == 1, "GCM IV");
}

void FrameMac::Add(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const int piece = static_cast<int>(std::min<size_t>(n, size_t{1} << 30));
    int length = 0;
    Require(EVP_EncryptUpdate(context_->cipher, nullptr, &length, p, piece) == 1, "GMAC update");
    p += piece;
    n -= static_cast<size_t>(piece);
  }
}

Tag FrameMac::Finish() {
  unsigned char none[16];
  int length = 0;
  Require(EVP_EncryptFinal_ex(context_->cipher, none, &length) == 1, "GMAC final");
  Tag tag{};
  Require(EVP_CIPHER_CTX_ctrl(context_->cipher, EVP_CTRL_GCM_GET_TAG, static_cast<int>(tag.size()),
                              tag.data()) == 1,
          "GMAC tag");
  return tag;
}

Tag FrameMac::Of(Direction direction, uint64_t counter, absl::string_view message) {
  Begin(direction, counter);
  Add(message.data(), message.size());
  return Finish();
}

}  // namespace ckpt::peer
