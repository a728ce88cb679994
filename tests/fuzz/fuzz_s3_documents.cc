// Fuzzes what ckpt reads from an S3 server or bucket that it does not
// trust: S3's XML documents (listings, errors, upload ids) through the
// element extraction and entity decoding, and commit objects
// (storage/step_location.h), and lease names (s3_leases.h: any key under
// a lease prefix). Nothing may crash or read out of bounds; what
// is extracted lies within the input; a commit record that parses encodes
// back to exactly the input, a lease name that parses is written back as
// the input, and escaping then unescaping is the identity.
//
// Input: byte 0 picks the step a commit record must name (mod 8), the rest
// is the document.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/storage/s3/s3_client.h"
#include "daemon/storage/s3/s3_leases.h"
#include "daemon/storage/s3/xml.h"
#include "daemon/storage/step_location.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int64_t step = data[0] % 8;
  const std::string doc(reinterpret_cast<const char*>(data + 1), size - 1);
  for (const char* tag : {"Contents", "Key", "CommonPrefixes", "Upload", "Error", "Code"}) {
    for (absl::string_view element : ckpt::storage::s3::XmlElements(doc, tag)) {
      if (element.data() < doc.data() || element.data() + element.size() > doc.data() + doc.size())
        std::abort();
      const std::optional<std::string> text = ckpt::storage::s3::XmlUnescape(element);
      if (text.has_value() && text->size() > element.size()) std::abort();
    }
  }
  (void)ckpt::storage::s3::ParseS3Error(doc);
  const std::optional<std::string> back =
      ckpt::storage::s3::XmlUnescape(ckpt::storage::s3::XmlEscape(doc));
  if (!back.has_value() || *back != doc) std::abort();
  if (const auto record = ckpt::storage::ParseCommitRecord(doc, step)) {
    if (ckpt::storage::EncodeCommitRecord(*record) != doc) std::abort();
  }
  if (const auto lease = ckpt::storage::s3::ParseLeaseName(doc)) {
    // Leading zeros or a sign would not round-trip; the parser may take
    // them (SimpleAtoi), so only the parts are checked.
    if (lease->id.empty() || lease->id.size() > 64 || lease->expiry_ms < 0) std::abort();
    if (doc.compare(0, 2, lease->exclusive ? "x." : "s.") != 0) std::abort();
    if (doc.compare(2, lease->id.size() + 1, absl::StrCat(lease->id, ".")) != 0) std::abort();
  }
  return 0;
}
