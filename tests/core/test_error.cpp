// qmoe::Error messages are one line of valid UTF-8 (printable_message): control characters and
// bytes outside well-formed UTF-8 sequences become \xNN, well-formed sequences stay.
#include <gtest/gtest.h>

#include <string>

#include "qmoe/error.h"

namespace qmoe {
namespace {

TEST(ErrorMessage, KeepsPrintableAsciiAndWellFormedUtf8) {
  EXPECT_EQ(printable_message("tensor 'w' has shape [3, 5]"), "tensor 'w' has shape [3, 5]");
  const std::string utf8 = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xed\x9f\xbf \xf4\x8f\xbf\xbf";  // é € 😀 U+D7FF U+10FFFF
  EXPECT_EQ(printable_message(utf8), utf8);
  EXPECT_EQ(printable_message(""), "");
}

TEST(ErrorMessage, EscapesControlCharactersAndBadBytes) {
  EXPECT_EQ(printable_message("a\nb\tc\x7f"), "a\\x0ab\\x09c\\x7f");
  EXPECT_EQ(printable_message(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(printable_message("\x80"), "\\x80");                             // lone continuation byte
  EXPECT_EQ(printable_message("\xc0\x80"), "\\xc0\\x80");                    // overlong NUL
  EXPECT_EQ(printable_message("\xe0\x9f\xbf"), "\\xe0\\x9f\\xbf");           // overlong 3-byte form
  EXPECT_EQ(printable_message("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // surrogate U+D800
  EXPECT_EQ(printable_message("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(printable_message("\xf5\x80"), "\\xf5\\x80");
  EXPECT_EQ(printable_message("x\xe2\x82"), "x\\xe2\\x82");                  // truncated at the end
  EXPECT_EQ(printable_message("\xe2\x82z\xc3\xa9"), "\\xe2\\x82z\xc3\xa9");  // bad then good
  EXPECT_EQ(printable_message("last read: '\xd7'"), "last read: '\\xd7'");
}

TEST(ErrorMessage, ErrorsCarryTheEscapedMessage) {
  try {
    bad_input("file x.safetensors: header: last read: '\xd7\n'");
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput);
    EXPECT_EQ(std::string(e.what()), "file x.safetensors: header: last read: '\\xd7\\x0a'");
  }
}

}  // namespace
}  // namespace qmoe
