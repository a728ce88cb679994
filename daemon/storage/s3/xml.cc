#include "daemon/storage/s3/xml.h"

#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ckpt::storage::s3 {
namespace {

// Appends code point cp as UTF-8; false for one XML does not allow.
bool AppendUtf8(uint32_t cp, std::string& out) {
  if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return true;
}

}  // namespace

std::vector<absl::string_view> XmlElements(absl::string_view xml, absl::string_view tag) {
  std::vector<absl::string_view> out;
  const std::string open = absl::StrCat("<", tag);
  const std::string close = absl::StrCat("</", tag, ">");
  size_t pos = 0;
  while (true) {
    const size_t start = xml.find(open, pos);
    if (start == absl::string_view::npos) break;
    const size_t after_name = start + open.size();
    if (after_name >= xml.size()) break;
    const char next = xml[after_name];
    // "<Key" must not match "<KeyMarker".
    if (next != '>' && next != ' ' && next != '/' && next != '\t' && next != '\n' && next != '\r') {
      pos = after_name;
      continue;
    }
    const size_t gt = xml.find('>', after_name);
    if (gt == absl::string_view::npos) break;
    if (xml[gt - 1] == '/') {            // <tag/>
      out.push_back(xml.substr(gt, 0));  // empty, but within the document
      pos = gt + 1;
      continue;
    }
    const size_t end = xml.find(close, gt + 1);
    if (end == absl::string_view::npos) break;
    out.push_back(xml.substr(gt + 1, end - gt - 1));
    pos = end + close.size();
  }
  return out;
}

std::optional<std::string> XmlText(absl::string_view xml, absl::string_view tag) {
  const std::vector<absl::string_view> elements = XmlElements(xml, tag);
  if (elements.empty()) return std::nullopt;
  return XmlUnescape(elements.front());
}

std::optional<std::string> XmlUnescape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '&') {
      out.push_back(text[i++]);
      continue;
    }
    const size_t semi = text.find(';', i);
    if (semi == absl::string_view::npos || semi - i > 12) return std::nullopt;
    const absl::string_view entity = text.substr(i + 1, semi - i - 1);
    if (entity == "amp") {
      out.push_back('&');
    } else if (entity == "lt") {
      out.push_back('<');
    } else if (entity == "gt") {
      out.push_back('>');
    } else if (entity == "quot") {
      out.push_back('"');
    } else if (entity == "apos") {
      out.push_back('\'');
    } else if (entity.size() >= 2 && entity[0] == '#') {
      uint32_t cp = 0;
      const bool hex = entity[1] == 'x' || entity[1] == 'X';
      const absl::string_view digits = entity.substr(hex ? 2 : 1);
      if (digits.empty()) return std::nullopt;
      for (char c : digits) {
        int v;
        if (c >= '0' && c <= '9') {
          v = c - '0';
        } else if (hex && c >= 'a' && c <= 'f') {
          v = c - 'a' + 10;
        } else if (hex && c >= 'A' && c <= 'F') {
          v = c - 'A' + 10;
        } else {
          return std::nullopt;
        }
        cp = cp * (hex ? 16 : 10) + static_cast<uint32_t>(v);
        if (cp > 0x10FFFF) return std::nullopt;
      }
      if (!AppendUtf8(cp, out)) return std::nullopt;
    } else {
      return std::nullopt;
    }
    i = semi + 1;
  }
  return out;
}

std::string XmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace ckpt::storage::s3
