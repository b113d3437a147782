//===- FileIO.h - checked file reads and durable writes of the runtime ----===//
//
// The runtime's readers (.npy, token files, checkpoint manifests and shards,
// plans) and writers (checkpoints, .npy) go through these, so every one
// refuses what is not a regular file (a FIFO would block, a directory reads
// as an I/O error), knows a file's size before it allocates for it, checks
// every read, write, fsync and close, and names the file and errno in its
// errors. POSIX calls (open, fstat, pread, write, fsync, rename); internal
// to the runtime library.
//
//===----------------------------------------------------------------------===//

#ifndef PARTITA_RUNTIME_LIB_CORE_FILEIO_H
#define PARTITA_RUNTIME_LIB_CORE_FILEIO_H

#include "partita/runtime/Tensor.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace partita::runtime::io {

/// An open regular file for reading. Opening never blocks (O_NONBLOCK, so a
/// FIFO is refused instead of waiting for a writer); a directory, FIFO,
/// socket or device is an Error naming `path`.
class InputFile {
public:
  /// Throws Error "cannot open <what> '<path>': <errno text>" when open
  /// fails, "cannot read <what> '<path>': it is a directory, not a regular
  /// file" (a FIFO, a socket, a device). `what` says what the file is for
  /// ("the training data"); may be empty.
  explicit InputFile(const std::string &path, const std::string &what = "");
  ~InputFile();
  InputFile(const InputFile &) = delete;
  InputFile &operator=(const InputFile &) = delete;

  /// The file's size when it was opened.
  uint64_t size() const { return bytes; }
  /// Reads exactly `n` bytes at `offset` into `out`; throws Error naming
  /// the file when it is shorter or a read fails.
  void readAt(uint64_t offset, void *out, size_t n) const;
  const std::string &path() const { return name; }
  /// The Error "cannot read <what> '<path>': <why>".
  Error error(const std::string &why) const;

private:
  std::string name, what;
  int fd = -1;
  uint64_t bytes = 0;
};

/// Reads all of `path`, after checking that it is a regular file of at most
/// `maxBytes` bytes (else an Error naming it, its size and the limit).
std::string readFile(const std::string &path, uint64_t maxBytes,
                     const std::string &what = "");

/// A file being written: every write, fsync and close is checked, and an
/// error names the file and errno ("cannot write '<path>': No space left
/// on device"). Creates or truncates the file.
class OutputFile {
public:
  explicit OutputFile(const std::string &path);
  ~OutputFile(); // closes without checking if close() was not called
  OutputFile(const OutputFile &) = delete;
  OutputFile &operator=(const OutputFile &) = delete;

  void write(const void *data, size_t n);
  /// fsync: the bytes are on the disk when it returns.
  void sync();
  void close();
  /// Throws the Error a failed write with `error` (an errno) would, for
  /// injected failures in tests.
  [[noreturn]] void fail(const char *doing, int error) const;
  const std::string &path() const { return name; }

private:
  std::string name;
  int fd = -1;
};

/// Writes `bytes` to `path` and closes it (checked; `durable`: fsync first).
void writeFile(const std::string &path, const std::string &bytes,
               bool durable);

/// fsync of a directory, so renames and new entries in it survive a crash.
/// Throws Error naming it (file systems that cannot sync a directory, EINVAL,
/// are let be).
void syncDirectory(const std::string &path);

/// Renames `from` to `to` (std::rename, checked).
void renamePath(const std::string &from, const std::string &to);

/// Writes `line` and a newline to stderr in one write and flushes it: under
/// mpirun every rank's messages share one stream, and a line written in
/// pieces is torn by the others'.
void writeErrorLine(const std::string &line);

/// strerror(error) as a string.
std::string errorText(int error);

/// a * b, or false when it does not fit in int64_t (a, b >= 0).
bool multiplyChecked(int64_t a, int64_t b, int64_t &out);

} // namespace partita::runtime::io

#endif // PARTITA_RUNTIME_LIB_CORE_FILEIO_H
