#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace wxtrain {

namespace {

std::string parent_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Writes all of [data, data + size) to fd, retrying short writes and EINTR; returns 0 or the errno.
int write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return EIO;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

void fsync_folder(const std::string& dir) {
  // Makes the rename itself durable; a folder that cannot be opened (some network file systems)
  // is not an error: the data is already on disk.
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

WriteError::WriteError(const std::string& path, int error_number, const std::string& hint)
    : Error("cannot write " + path + ": " + std::strerror(error_number) + (hint.empty() ? "" : "; " + hint)),
      path_(path),
      errno_(error_number) {}

void make_directories(const std::string& dir) {
  if (dir.empty()) return;
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return;
    throw WriteError(dir, ENOTDIR);
  }
  const std::string parent = parent_of(dir);
  if (parent != dir && parent != "." && parent != "/") make_directories(parent);
  if (::mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) {
    // The folder is missing: say so first; why it cannot be made ("Permission denied" on its
    // parent) comes second, so nobody looks for a permission problem on a folder that is not there.
    const int cause = errno;
    throw WriteError(dir, ENOENT, "the folder does not exist and cannot be created in " + parent + " (" +
                                      std::strerror(cause) + ")");
  }
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  make_directories(parent_of(path_));
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd_ < 0) throw WriteError(path_, errno);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::fail(int error_number, const std::string& hint) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  throw WriteError(path_, error_number, hint);
}

void AtomicFile::write(const void* data, size_t size) {
  if (fd_ < 0) throw WriteError(path_, EBADF);
  if (deferred_errno_) fail(deferred_errno_);
  if (const int e = write_all(fd_, data, size)) fail(e);
}

std::function<size_t(const void*, size_t)> AtomicFile::sink() {
  return [this](const void* data, size_t size) -> size_t {
    if (deferred_errno_ == 0 && fd_ >= 0) deferred_errno_ = write_all(fd_, data, size);
    return size;
  };
}

void AtomicFile::commit(const std::string& hint) {
  if (fd_ < 0) throw WriteError(path_, EBADF, hint);
  if (deferred_errno_) fail(deferred_errno_, hint);
  // fsync and close report the write-back errors (EIO, ENOSPC on NFS) that write() did not.
  if (::fsync(fd_) != 0 && errno != EINVAL) fail(errno, hint);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && errno != EINTR) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    throw WriteError(path_, e, hint);
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    throw WriteError(path_, e, hint);
  }
  fsync_folder(parent_of(path_));
}

void write_file_atomically(const std::string& path, std::string_view text, const std::string& hint) {
  AtomicFile file(path);
  try {
    file.write(text);
  } catch (const WriteError& e) {
    if (hint.empty()) throw;
    throw WriteError(path, e.error_number(), hint);
  }
  file.commit(hint);
}

AppendFile::AppendFile(std::string path, bool truncate) : path_(std::move(path)) {
  make_directories(parent_of(path_));
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (truncate ? O_TRUNC : 0), 0666);
  if (fd_ < 0) throw WriteError(path_, errno);
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

bool AppendFile::empty() const {
  struct stat st {};
  return ::fstat(fd_, &st) == 0 && st.st_size == 0;
}

void AppendFile::append(std::string_view text) {
  struct stat st {};
  const off_t before = ::fstat(fd_, &st) == 0 ? st.st_size : -1;
  if (const int e = write_all(fd_, text.data(), text.size())) {
    // Half a CSV row would be read as a row: end the file at its last complete line instead.
    // If that fails too the write error is still the one to report.
    if (before >= 0) {
      [[maybe_unused]] const int ignored = ::ftruncate(fd_, before);
    }
    throw WriteError(path_, e);
  }
}

}  // namespace wxtrain
