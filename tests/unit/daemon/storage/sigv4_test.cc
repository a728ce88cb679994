// AWS Signature Version 4 against AWS's published vectors: the SigV4 test
// suite (docs.aws.amazon.com/general/latest/gr/signature-v4-test-suite) and
// S3's own GET Object example. A wrong canonical form, key derivation or
// encoding changes every signature below.
#include "daemon/storage/s3/sigv4.h"

#include <string>

#include "tests/catch.h"

namespace ckpt::storage::s3 {
namespace {

const Credentials kSuite{"AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""};
const Scope kSuiteScope{"us-east-1", "service"};
const absl::Time kSuiteTime =
    absl::FromCivil(absl::CivilSecond(2015, 8, 30, 12, 36, 0), absl::UTCTimeZone());
constexpr char kEmptySha[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

SigningRequest Suite(const std::string& method) {
  SigningRequest r;
  r.method = method;
  r.headers = {{"Host", "example.amazonaws.com"}, {"X-Amz-Date", "20150830T123600Z"}};
  r.payload_sha256 = kEmptySha;
  return r;
}

std::string SignatureOf(const Signature& s) {
  return s.authorization.substr(s.authorization.rfind('=') + 1);
}

TEST_CASE("SigV4 matches the test suite's get-vanilla, with its canonical forms", "[unit][s3]") {
  const Signature s = SignV4(Suite("GET"), kSuite, kSuiteScope, kSuiteTime);
  CHECK(s.canonical_request ==
        "GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n" +
            std::string(kEmptySha));
  CHECK(s.string_to_sign ==
        "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
        "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63");
  CHECK(s.authorization ==
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        "SignedHeaders=host;x-amz-date, "
        "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31");
}

TEST_CASE("SigV4 sorts query parameters by name, then value", "[unit][s3]") {
  SigningRequest by_name = Suite("GET");
  by_name.query = {{"Param2", "value2"}, {"Param1", "value1"}};
  const Signature a = SignV4(by_name, kSuite, kSuiteScope, kSuiteTime);
  CHECK(a.canonical_request.find("\n/\nParam1=value1&Param2=value2\n") != std::string::npos);
  CHECK(SignatureOf(a) == "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500");

  SigningRequest by_value = Suite("GET");
  by_value.query = {{"Param1", "value2"}, {"Param1", "Value1"}};
  CHECK(SignatureOf(SignV4(by_value, kSuite, kSuiteScope, kSuiteTime)) ==
        "eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15b2382bd1");

  SigningRequest post = Suite("POST");
  post.query = {{"Param1", "value1"}};
  CHECK(SignatureOf(SignV4(post, kSuite, kSuiteScope, kSuiteTime)) ==
        "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11");
}

TEST_CASE("SigV4 joins a repeated header's values in order", "[unit][s3]") {
  SigningRequest r = Suite("GET");
  for (const char* v : {"value4", "value1", "value3", "value2"})
    r.headers.push_back({"My-Header1", v});
  const Signature s = SignV4(r, kSuite, kSuiteScope, kSuiteTime);
  CHECK(s.signed_headers == "host;my-header1;x-amz-date");
  CHECK(s.canonical_request.find("my-header1:value4,value1,value3,value2\n") != std::string::npos);
  CHECK(SignatureOf(s) == "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01");
}

TEST_CASE("SigV4 matches S3's GET Object example", "[unit][s3]") {
  SigningRequest r;
  r.method = "GET";
  r.path = "/test.txt";
  r.payload_sha256 = kEmptySha;
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"Range", "bytes=0-9"},
               {"x-amz-content-sha256", kEmptySha},
               {"x-amz-date", "20130524T000000Z"}};
  const Signature s = SignV4(
      r, {"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""},
      {"us-east-1", "s3"}, absl::FromCivil(absl::CivilSecond(2013, 5, 24), absl::UTCTimeZone()));
  CHECK(s.authorization ==
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  CHECK(s.authorization.find("wJalrXUtnFEMI") == std::string::npos);
}

TEST_CASE("SigV4 encodes keys as S3 does, and trims header values", "[unit][s3]") {
  CHECK(UriEncode("a b/c~d*é", true) == "a%20b/c~d%2A%C3%A9");
  CHECK(UriEncode("a/b=c&d", false) == "a%2Fb%3Dc%26d");
  CHECK(AmzDate(kSuiteTime) == "20150830T123600Z");
  CHECK(Sha256Hex("") == kEmptySha);
  SigningRequest r = Suite("PUT");
  r.path = "/bucket/step-7/./data 0";  // "." is a valid key segment in S3: kept
  r.headers.push_back({"X-Amz-Meta-Note", "  two   spaces  "});
  const Signature s = SignV4(r, kSuite, kSuiteScope, kSuiteTime);
  CHECK(s.canonical_request.find("\n/bucket/step-7/./data%200\n") != std::string::npos);
  CHECK(s.canonical_request.find("x-amz-meta-note:two spaces\n") != std::string::npos);
}

}  // namespace
}  // namespace ckpt::storage::s3
