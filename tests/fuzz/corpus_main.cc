// Replays a fuzz target over corpus files: the regression-test driver of
// every fuzz target in the plain (gcc, no libFuzzer) build.
//
//   <target>_corpus_test DIR_OR_FILE...
//
// Feeds each regular file (directories are walked recursively, in sorted
// order) to LLVMFuzzerTestOneInput once. Exits 1 when no file was found (a
// misplaced corpus must not pass silently); a broken invariant aborts inside
// the target.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

#include "tests/fuzz/fuzz_target.h"

namespace {

namespace fs = std::filesystem;

void Collect(const fs::path& path, std::vector<fs::path>* files) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const fs::directory_entry& e :
         fs::recursive_directory_iterator(path, ec)) {
      if (e.is_regular_file(ec)) files->push_back(e.path());
    }
  } else if (fs::is_regular_file(path, ec)) {
    files->push_back(path);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) Collect(argv[i], &files);
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "corpus_main: no corpus file under the arguments\n");
    return 1;
  }
  for (const fs::path& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "corpus_main: cannot read %s\n", file.c_str());
      return 1;
    }
    // Copied to an exactly sized heap buffer, so ASan sees any read past
    // the input's end, as under libFuzzer.
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
    std::vector<uint8_t> data(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(data.empty() ? nullptr : data.data(), data.size());
  }
  std::printf("corpus_main: %zu inputs passed\n", files.size());
  return 0;
}
