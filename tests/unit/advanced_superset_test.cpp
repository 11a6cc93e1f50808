// 06-io_uring/advanced.cpp is main.cpp plus flags: every line of main.cpp, from its first #include on, appears in
// advanced.cpp in the same order, so `diff main.cpp advanced.cpp` shows only lines that advanced.cpp adds. Two
// lines may differ: the one that names the program and its flags for the options parser, and the bound on the size
// of a Conn, which the flags' own state enlarges.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <string>
#include <vector>

namespace {

std::vector<std::string> lines_from_first_include(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  bool started = false;
  for (std::string line; std::getline(in, line);) {
    started = started || line.rfind("#include", 0) == 0;
    if (started) lines.push_back(line);
  }
  return lines;
}

TEST(Advanced, IsMainPlusFlags) {
  // main.cpp now drives the connection engine (common/connection.hpp, issue 34); advanced.cpp still carries the
  // loop main.cpp had before, until it is built on main.cpp's loop instead of copying it. Then this test goes.
  GTEST_SKIP() << "advanced.cpp still copies main.cpp's loop from before the connection engine (issue 34)";
  const std::string dir = std::string(PSP_SOURCE_DIR) + "/06-io_uring/";
  const std::vector<std::string> main_lines = lines_from_first_include(dir + "main.cpp");
  const std::vector<std::string> advanced = lines_from_first_include(dir + "advanced.cpp");
  ASSERT_GT(main_lines.size(), 100u);
  ASSERT_GT(advanced.size(), main_lines.size());
  const std::set<std::string> may_differ = {
      R"(  const Model model{"06-io_uring", default_thread_count(), "", {kProcessesFlag}};)",
      R"(static_assert(sizeof(Conn) <= 40, "an idle connection keeps only its Conn: keep it small");)",
  };
  // Greedy matching finds the subsequence when there is one: each line of main.cpp takes its first match after the
  // previous one's.
  std::size_t at = 0;
  std::string missing;
  for (const std::string& line : main_lines) {
    if (may_differ.count(line)) continue;
    std::size_t found = at;
    while (found < advanced.size() && advanced[found] != line) ++found;
    if (found == advanced.size()) {
      missing += "  " + line + "\n";
      continue;  // report every missing line, not just the first
    }
    at = found + 1;
  }
  EXPECT_TRUE(missing.empty()) << "lines of main.cpp that advanced.cpp lacks (or has out of order):\n" << missing;
}

}  // namespace
