#pragma once
// Every file a run writes goes through here, so a full disk (ENOSPC), an I/O error (EIO) or a
// folder the user may not write (EACCES) ends in one message that names the file and the cause —
// "cannot write runs/x/checkpoint.pt: No space left on device" — and never in an abort, a partial
// file or a lost earlier version.
//
// - AtomicFile / write_file_atomically: a whole file (checkpoint, run.toml, profile outputs, the
//   run file edited by tune-batch --write) is written to PATH.tmp, fsynced and renamed over PATH.
//   On any failure PATH.tmp is removed and PATH keeps its previous contents.
// - AppendFile: a log that grows by lines (metrics.csv, validation.csv). A line that cannot be
//   written whole is cut off again, so the file ends with the last complete line.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "core/error.h"

namespace wxtrain {

// A file could not be written. what(): "cannot write <path>: <strerror(errno)>[; <hint>]".
class WriteError : public Error {
 public:
  WriteError(const std::string& path, int error_number, const std::string& hint = "");
  int error_number() const { return errno_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int errno_;
};

// Creates `dir` and its parents (like mkdir -p); throws WriteError naming the first one that fails:
// "cannot write out/x: No such file or directory; the folder does not exist and cannot be created
// in out (Permission denied)".
void make_directories(const std::string& dir);

class AtomicFile {
 public:
  // Opens PATH.tmp for writing (creating PATH's folder first); throws WriteError.
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // not committed: PATH.tmp is removed, PATH untouched
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Writes all of `data`; throws WriteError on the first failure.
  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }

  // A sink for writers that must not see an exception (LibTorch's zip writer calls it from C code
  // and its destructor finishes the archive): it always reports `size` bytes written, and the first
  // error is kept for commit() to report. Valid while this AtomicFile lives.
  std::function<size_t(const void*, size_t)> sink();

  // fsync, close, rename PATH.tmp over PATH, fsync the folder. Throws WriteError (with `hint`
  // appended) on any failure, including one the sink kept; PATH.tmp is removed then.
  void commit(const std::string& hint = "");

 private:
  [[noreturn]] void fail(int error_number, const std::string& hint = "");
  std::string path_, tmp_;
  int fd_ = -1;
  int deferred_errno_ = 0;  // the sink's first error
};

// The common case: `text` becomes PATH's contents, atomically.
void write_file_atomically(const std::string& path, std::string_view text, const std::string& hint = "");

class AppendFile {
 public:
  // Opens PATH for appending (truncate = start it empty); throws WriteError.
  AppendFile(std::string path, bool truncate);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // Appends `text` whole or, on failure, cuts the file back to where it was and throws WriteError.
  void append(std::string_view text);
  bool empty() const;  // no bytes yet (a header is due)

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace wxtrain
