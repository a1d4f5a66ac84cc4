#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"

using namespace wxtrain;
namespace fs = std::filesystem;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string fresh_dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/wxtrain_atomic_" + name;
  fs::remove_all(dir);
  return dir;
}

}  // namespace

TEST(AtomicFile, ReplacesTheFileWholeAndLeavesNoTemporary) {
  const std::string dir = fresh_dir("replace");
  const std::string path = dir + "/sub/out.txt";  // the folder is made on the way
  write_file_atomically(path, "first\n");
  write_file_atomically(path, "second\n");
  EXPECT_EQ(read(path), "second\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(AtomicFile, AnUncommittedFileLeavesThePreviousVersion) {
  const std::string dir = fresh_dir("abandon");
  const std::string path = dir + "/out.txt";
  write_file_atomically(path, "kept\n");
  {
    AtomicFile f(path);
    f.write("half a");
  }  // an exception between write and commit ends here
  EXPECT_EQ(read(path), "kept\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(AtomicFile, ErrorsNameTheFileAndTheCause) {
  const std::string dir = fresh_dir("errors");
  fs::create_directories(dir);
  write_file_atomically(dir + "/plain", "x");
  try {
    write_file_atomically(dir + "/plain/inside.txt", "y");  // a file where a folder should be
    FAIL();
  } catch (const WriteError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write " + dir + "/plain: Not a directory") << e.what();
  }
}

TEST(AppendFile, AFullDeviceIsAnErrorNamingTheFile) {
  // /dev/full fails every write with ENOSPC, as a full disk does.
  AppendFile f("/dev/full", /*truncate=*/false);
  try {
    f.append("step,loss\n");
    FAIL();
  } catch (const WriteError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write /dev/full: No space left on device");
    EXPECT_EQ(e.error_number(), ENOSPC);
  }
}

TEST(AppendFile, AppendsOrStartsAfresh) {
  const std::string dir = fresh_dir("append");
  const std::string path = dir + "/log.csv";
  {
    AppendFile f(path, true);
    EXPECT_TRUE(f.empty());
    f.append("a\n");
  }
  {
    AppendFile f(path, false);
    EXPECT_FALSE(f.empty());
    f.append("b\n");
  }
  EXPECT_EQ(read(path), "a\nb\n");
  AppendFile(path, true).append("c\n");
  EXPECT_EQ(read(path), "c\n");
}
