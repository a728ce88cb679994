// Just enough XML for S3's responses (listings, multipart uploads, errors):
// the text of flat elements found by tag name, entities decoded. S3's
// documents are shallow and never mix markup into the values we read, so
// no general parser is needed; every input is bounded by the HTTP layer and
// nothing here allocates more than its input's size.
#ifndef CKPT_DAEMON_STORAGE_S3_XML_H_
#define CKPT_DAEMON_STORAGE_S3_XML_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ckpt::storage::s3 {

// The raw contents of each <tag>...</tag> (or <tag attr="...">...</tag>) in
// document order, not descending into a match. <tag/> is an empty element.
std::vector<absl::string_view> XmlElements(absl::string_view xml, absl::string_view tag);
// The decoded text of the first <tag> in xml, or nullopt when there is none.
std::optional<std::string> XmlText(absl::string_view xml, absl::string_view tag);
// Decodes &amp; &lt; &gt; &quot; &apos; and numeric references; nullopt for a
// malformed or unknown entity.
std::optional<std::string> XmlUnescape(absl::string_view text);
// Escapes & < > " ' for element text.
std::string XmlEscape(absl::string_view text);

}  // namespace ckpt::storage::s3

#endif  // CKPT_DAEMON_STORAGE_S3_XML_H_
