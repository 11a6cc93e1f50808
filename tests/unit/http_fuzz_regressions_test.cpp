// Inputs that fuzz/parser_fuzz found, each kept as a unit test once minimised (fuzz/README.md says how). Each test
// says what the fuzzer saw and what the parser should answer, with the part of the RFC that says so.
#include "common/http.hpp"

#include <gtest/gtest.h>

namespace {

using http::Parse;

// Found by parser_fuzz_run within its first 5,000 executions: a signed integer overflow, which is undefined
// behaviour, in detail::parse_content_length(). Once it had seen a byte that is not a digit, or more than 18 digits,
// it noted the value was invalid but went on multiplying to the end of the value. Only a sanitizer build
// (./tests/run_tests.sh --sanitize address) failed here: elsewhere the overflow happened to wrap, and the answer
// happened to be the right one. RFC 9112 6.3 (5): an invalid Content-Length in a request is answered 400.
TEST(FuzzRegressions, ContentLengthThatIsNotANumberDoesNotOverflow) {
  Parse p = http::parse_request("G / HTTP/1.1\nContent-Length:ransfer-Encoding: 2\n");  // the minimised input
  EXPECT_EQ(p.status, Parse::kError);
  EXPECT_EQ(p.error, 400);
}

// The same overflow with digits only. RFC 9110 8.6: "Any Content-Length field value greater than or equal to zero
// is valid", and a recipient must expect large numbers and not overflow on them. So this value is not invalid (the
// parser used to answer 400 from 19 digits on); it announces a body, which we refuse as too large: 413
// (RFC 9110 15.5.14), as for any other length above 0.
TEST(FuzzRegressions, HugeContentLengthIsTooLargeNotAnOverflow) {
  Parse p = http::parse_request("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 9999999999999999999\r\n\r\n");
  EXPECT_EQ(p.status, Parse::kError);
  EXPECT_EQ(p.error, 413);
}

}  // namespace
