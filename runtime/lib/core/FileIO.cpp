//===- FileIO.cpp - checked file reads and durable writes of the runtime --===//

#include "FileIO.h"

#include "partita/runtime/Tensor.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace partita::runtime::io {

std::string errorText(int error) { return std::strerror(error); }

bool multiplyChecked(int64_t a, int64_t b, int64_t &out) {
  if (a < 0 || b < 0 || (b != 0 && a > INT64_MAX / b))
    return false;
  out = a * b;
  return true;
}

InputFile::InputFile(const std::string &path, const std::string &what)
    : name(path), what(what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
  // writer, forever. It has no effect on regular files.
  fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    throw Error("cannot open " + (what.empty() ? "" : what + " ") + "'" +
                path + "': " + errorText(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fd = -1;
    throw error(errorText(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fd = -1;
    const char *kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device";
    throw error(std::string("it is ") + kind + ", not a regular file");
  }
  bytes = uint64_t(st.st_size);
}

Error InputFile::error(const std::string &why) const {
  return Error("cannot read " + (what.empty() ? "" : what + " ") + "'" +
               name + "': " + why);
}

InputFile::~InputFile() {
  if (fd >= 0)
    ::close(fd);
}

void InputFile::readAt(uint64_t offset, void *out, size_t n) const {
  auto *p = static_cast<char *>(out);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, off_t(offset));
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      throw error(errorText(errno));
    if (got == 0)
      throw error("it ended at byte " + std::to_string(offset) +
                  " (was it truncated while read?)");
    p += got;
    n -= size_t(got);
    offset += uint64_t(got);
  }
}

std::string readFile(const std::string &path, uint64_t maxBytes,
                     const std::string &what) {
  InputFile in(path, what);
  if (in.size() > maxBytes)
    throw in.error("it holds " + std::to_string(in.size()) +
                   " bytes, more than the " + std::to_string(maxBytes) +
                   " such a file may have");
  std::string bytes(size_t(in.size()), '\0');
  in.readAt(0, bytes.data(), bytes.size());
  return bytes;
}

OutputFile::OutputFile(const std::string &path) : name(path) {
  fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error("cannot create '" + path + "': " + errorText(errno));
}

OutputFile::~OutputFile() {
  if (fd >= 0)
    ::close(fd);
}

void OutputFile::fail(const char *doing, int error) const {
  throw Error(std::string("cannot ") + doing + " '" + name +
              "': " + errorText(error));
}

void OutputFile::write(const void *data, size_t n) {
  const auto *p = static_cast<const char *>(data);
  while (n > 0) {
    ssize_t put = ::write(fd, p, n);
    if (put < 0 && errno == EINTR)
      continue;
    if (put < 0)
      fail("write", errno);
    p += put;
    n -= size_t(put);
  }
}

void OutputFile::sync() {
  if (::fsync(fd) != 0)
    fail("sync", errno);
}

void OutputFile::close() {
  int rc = ::close(fd);
  fd = -1;
  // Write-back errors of a network file system come at close.
  if (rc != 0)
    fail("write", errno);
}

void writeFile(const std::string &path, const std::string &bytes,
               bool durable) {
  OutputFile out(path);
  out.write(bytes.data(), bytes.size());
  if (durable)
    out.sync();
  out.close();
}

void syncDirectory(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    throw Error("cannot open directory '" + path + "': " + errorText(errno));
  int rc = ::fsync(fd), error = errno;
  ::close(fd);
  if (rc != 0 && error != EINVAL)
    throw Error("cannot sync directory '" + path + "': " + errorText(error));
}

void renamePath(const std::string &from, const std::string &to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw Error("cannot rename '" + from + "' to '" + to +
                "': " + errorText(errno));
}

void writeErrorLine(const std::string &line) {
  std::string text = line + "\n";
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

} // namespace partita::runtime::io
