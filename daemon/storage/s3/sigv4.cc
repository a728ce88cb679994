#include "daemon/storage/s3/sigv4.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ckpt::storage::s3 {
namespace {

constexpr char kAlgorithm[] = "AWS4-HMAC-SHA256";

std::string Hex(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}

// HMAC-SHA256(key, data), raw.
std::string Hmac(absl::string_view key, absl::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &n);
  return std::string(reinterpret_cast<const char*>(out), n);
}

// A header value as SigV4 signs it: no leading or trailing spaces, runs of
// spaces as one.
std::string TrimValue(absl::string_view value) {
  std::string out;
  bool space = false;
  for (char c : absl::StripAsciiWhitespace(value)) {
    const bool is_space = c == ' ' || c == '\t';
    if (is_space && space) continue;
    out.push_back(is_space ? ' ' : c);
    space = is_space;
  }
  return out;
}

}  // namespace

std::string Sha256Hex(absl::string_view bytes) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), out, &n, EVP_sha256(), nullptr);
  return Hex(out, n);
}

std::string AmzDate(absl::Time at) {
  return absl::FormatTime("%Y%m%dT%H%M%SZ", at, absl::UTCTimeZone());
}

std::string UriEncode(absl::string_view s, bool keep_slash) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' ||
        (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kDigits[c >> 4]);
      out.push_back(kDigits[c & 15]);
    }
  }
  return out;
}

Signature SignV4(const SigningRequest& request, const Credentials& credentials, const Scope& scope,
                 absl::Time at) {
  // Query: encoded, then sorted by name and value.
  std::vector<std::pair<std::string, std::string>> query;
  for (const auto& [name, value] : request.query) {
    query.emplace_back(UriEncode(name, false), UriEncode(value, false));
  }
  std::sort(query.begin(), query.end());
  std::vector<std::string> query_parts;
  for (const auto& [name, value] : query) query_parts.push_back(absl::StrCat(name, "=", value));

  // Headers: lower-case names, sorted; repeated ones joined in order.
  std::map<std::string, std::string> headers;
  for (const auto& [name, value] : request.headers) {
    std::string& joined = headers[absl::AsciiStrToLower(name)];
    if (!joined.empty()) joined += ',';
    joined += TrimValue(value);
  }
  std::string canonical_headers;
  std::vector<std::string> names;
  for (const auto& [name, value] : headers) {
    absl::StrAppend(&canonical_headers, name, ":", value, "\n");
    names.push_back(name);
  }
  Signature out;
  out.signed_headers = absl::StrJoin(names, ";");
  out.canonical_request = absl::StrCat(request.method, "\n", UriEncode(request.path, true), "\n",
                                       absl::StrJoin(query_parts, "&"), "\n", canonical_headers,
                                       "\n", out.signed_headers, "\n", request.payload_sha256);

  const std::string amz_date = AmzDate(at);
  const std::string day = amz_date.substr(0, 8);
  const std::string credential_scope =
      absl::StrCat(day, "/", scope.region, "/", scope.service, "/aws4_request");
  out.string_to_sign = absl::StrCat(kAlgorithm, "\n", amz_date, "\n", credential_scope, "\n",
                                    Sha256Hex(out.canonical_request));

  const std::string key =
      Hmac(Hmac(Hmac(Hmac(absl::StrCat("AWS4", credentials.secret_access_key), day), scope.region),
                scope.service),
           "aws4_request");
  const std::string signature = Hmac(key, out.string_to_sign);
  out.authorization =
      absl::StrCat(kAlgorithm, " Credential=", credentials.access_key_id, "/", credential_scope,
                   ", SignedHeaders=", out.signed_headers, ", Signature=",
                   Hex(reinterpret_cast<const unsigned char*>(signature.data()), signature.size()));
  return out;
}

}  // namespace ckpt::storage::s3
