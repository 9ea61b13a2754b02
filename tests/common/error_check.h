// Header-only helper shared by test directories (core, routing, ...): expect a call to be refused
// as bad input (a qmoe::Error of kind kBadInput).
#pragma once
#include <gtest/gtest.h>

#include "qmoe/error.h"

namespace qmoe::test {

// Runs `f` and expects a qmoe::Error of kind kBadInput (the message is shown when the kind differs).
template <class F>
void expect_bad_input(F f) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kBadInput) << e.what();
  }
}

}  // namespace qmoe::test
