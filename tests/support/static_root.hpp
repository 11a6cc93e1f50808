#pragma once
// A folder for the servers to serve with --root, and a reader that checks a body of any size as it arrives.
//
// static_root() builds the folder once per test process, on first use, and removes it at exit:
//
//   /dev/shm/psp-static-PID-XXXXXX/  the parent (in /tmp without a usable /dev/shm): never reachable through it
//     secret.txt                   holds `marker`, a string that must never come back in any response
//     index.html                   holds `marker` too (what /outside-dir/ would serve if the link were followed)
//     root/                        the --root
//       index.html style.css app.js data.json notes.txt img.png pic.jpg icon.svg mod.wasm doc.pdf LOUD.PNG
//       noext  "with space.txt"  "100%.txt"  "a+b.txt"       small files, each with its own text
//       sub/index.html   empty/ (no index.html)
//       link-to-notes.txt -> notes.txt        stays inside: followed
//       link-to-secret    -> ../secret.txt     leaves the root: refused
//       link-to-passwd    -> /etc/passwd       leaves the root: refused
//       outside-dir       -> the parent        a directory outside: refused
//       fifo              a named pipe with no writer
//       big.bin           50 MiB of pseudo-random bytes (a fixed seed), FNV-1a hash known
//       sparse.bin        5 GiB of zeros, a hole made with ftruncate: no disk, past 4 GiB
//
// Every file's mtime is set to kMtime, so Last-Modified is known exactly. The folder is removed at exit by a walk
// that never follows a link (it holds links to its parent and to /etc); a folder left by a test process that died
// (its PID is gone) is removed the same way by the next one, since /dev/shm is memory.
//
// Why /dev/shm: on tmpfs a read of the hole is served from the kernel's zero page, so 5 GiB go out in a few
// seconds without touching memory. On a disk file system every read of a hole fills the page cache with zeros
// (5 GiB of it), and the first full read took 10-30 s here.

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/client.hpp"

namespace psp::test {

// FNV-1a, 64 bits: a checksum the test computes itself, sharing no code with the servers.
class Fnv1a {
 public:
  void add(const char* data, std::size_t n) {
    std::uint64_t h = hash_;
    for (std::size_t i = 0; i < n; ++i) {
      h ^= static_cast<unsigned char>(data[i]);
      h *= 0x100000001b3ULL;
    }
    hash_ = h;
  }
  std::uint64_t value() const { return hash_; }

 private:
  std::uint64_t hash_ = 0xcbf29ce484222325ULL;
};

inline std::uint64_t fnv1a(std::string_view bytes) {
  Fnv1a h;
  h.add(bytes.data(), bytes.size());
  return h.value();
}

// A file the tests fetch: how it is asked for, and what must come back.
struct ServedFile {
  std::string target;        // the request target, percent-encoded where the name needs it
  std::string content_type;  // exactly what the server must send
  std::string body;
};

class StaticRoot {
 public:
  static constexpr std::time_t kMtime = 1614834367;  // Thu, 04 Mar 2021 05:06:07 GMT
  static constexpr const char* kLastModified = "Thu, 04 Mar 2021 05:06:07 GMT";
  static constexpr std::uint64_t kBigSize = 50ULL << 20;
  static constexpr std::uint64_t kSparseSize = 5ULL << 30;  // 5368709120

  StaticRoot() { build(); }
  StaticRoot(const StaticRoot&) = delete;
  StaticRoot& operator=(const StaticRoot&) = delete;
  ~StaticRoot() {
    if (!parent_.empty()) remove_tree(AT_FDCWD, parent_.c_str());
  }

  const std::string& error() const { return error_; }  // empty when the folder is complete
  const std::string& parent() const { return parent_; }
  const std::string& dir() const { return dir_; }
  const std::string& marker() const { return marker_; }
  // The small files, each served with 200 under its target.
  const std::vector<ServedFile>& files() const { return files_; }
  const ServedFile& file(std::string_view target) const {
    for (const auto& f : files_)
      if (f.target == target) return f;
    std::abort();  // a typo in a test
  }
  const std::string& index_body() const { return file("/index.html").body; }
  const std::string& sub_index_body() const { return sub_index_; }
  std::uint64_t big_hash() const { return big_hash_; }

  // A copy of big.bin under `name` in the root (for a test that changes it); removed with the folder, or earlier
  // by the test. Returns the full path, or "" with `why` set.
  std::string copy_of_big(const std::string& name, std::string& why) const {
    const std::string path = dir_ + "/" + name;
    Fd in(::open((dir_ + "/big.bin").c_str(), O_RDONLY | O_CLOEXEC));
    Fd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!in.valid() || !out.valid()) {
      why = "open: " + errno_text(errno);
      return "";
    }
    std::uint64_t left = kBigSize;
    while (left > 0) {
      const ssize_t n = ::copy_file_range(in.get(), nullptr, out.get(), nullptr, left, 0);
      if (n <= 0) {
        why = "copy_file_range: " + (n == 0 ? std::string("early end") : errno_text(errno));
        return "";
      }
      left -= static_cast<std::uint64_t>(n);
    }
    return path;
  }

 private:
  // /dev/shm when it is writable and has room for the 50 MiB file and a copy of it; else /tmp.
  static std::string base_folder() {
    struct statvfs v {};
    if (::access("/dev/shm", W_OK) == 0 && ::statvfs("/dev/shm", &v) == 0 &&
        static_cast<std::uint64_t>(v.f_bavail) * v.f_frsize >= 512 * (1ULL << 20))
      return "/dev/shm";
    return "/tmp";
  }

  // Removes `name` in `dir_fd` and, for a real directory, everything in it. Links are removed, never followed
  // (AT_SYMLINK_NOFOLLOW, O_NOFOLLOW).
  static void remove_tree(int dir_fd, const char* name) {
    struct stat st {};
    if (::fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return;
    if (!S_ISDIR(st.st_mode)) {
      ::unlinkat(dir_fd, name, 0);
      return;
    }
    const int fd = ::openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    DIR* d = ::fdopendir(fd);
    if (d == nullptr) {
      ::close(fd);
      return;
    }
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
    for (const std::string& n : names) remove_tree(fd, n.c_str());
    ::closedir(d);  // closes fd
    ::unlinkat(dir_fd, name, AT_REMOVEDIR);
  }

  // psp-static-PID-XXXXXX folders whose process no longer exists.
  static void remove_stale(const std::string& base) {
    DIR* d = ::opendir(base.c_str());
    if (d == nullptr) return;
    std::vector<std::string> stale;
    const std::string prefix = "psp-static-";
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale.push_back(name);
    }
    for (const std::string& name : stale) remove_tree(::dirfd(d), name.c_str());
    ::closedir(d);
  }

  void build() {
    const std::string base = base_folder();
    remove_stale(base);
    std::string tmpl = base + "/psp-static-" + std::to_string(::getpid()) + "-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) return fail("mkdtemp " + tmpl + ": " + errno_text(errno));
    // mkdtemp makes it 0700: a server that runs as another user (tests/grade.sh --user, the default as root; nginx's
    // workers) could not reach the root through it, and would answer 403 to everything. 0711: it may pass through
    // to the root, and to what a traversal bug would reach by name, but not list the folder.
    ::chmod(tmpl.c_str(), 0711);
    parent_ = tmpl;
    dir_ = parent_ + "/root";
    // Unique per run: a copy of it anywhere in a response can only have come from outside the root.
    marker_ = "PSP-SECRET-" + std::to_string(::getpid()) + "-" + std::to_string(std::time(nullptr)) + "-8f3a";

    put(parent_ + "/secret.txt", "top secret: " + marker_ + "\n");
    put(parent_ + "/index.html", "<p>outside the root: " + marker_ + "</p>\n");
    mkdir(dir_);
    mkdir(dir_ + "/sub");
    mkdir(dir_ + "/empty");

    struct Small {
      const char* name;
      const char* target;
      const char* type;
    };
    // The expected Content-Type of each extension, as common/files.hpp promises: text types carry a charset.
    const Small smalls[] = {
        {"index.html", "/index.html", "text/html; charset=utf-8"},
        {"style.css", "/style.css", "text/css; charset=utf-8"},
        {"app.js", "/app.js", "text/javascript; charset=utf-8"},
        {"data.json", "/data.json", "application/json"},
        {"notes.txt", "/notes.txt", "text/plain; charset=utf-8"},
        {"img.png", "/img.png", "image/png"},
        {"pic.jpg", "/pic.jpg", "image/jpeg"},
        {"icon.svg", "/icon.svg", "image/svg+xml"},
        {"mod.wasm", "/mod.wasm", "application/wasm"},
        {"doc.pdf", "/doc.pdf", "application/pdf"},
        {"LOUD.PNG", "/LOUD.PNG", "image/png"},  // extensions are case-insensitive
        {"noext", "/noext", "application/octet-stream"},
        {"with space.txt", "/with%20space.txt", "text/plain; charset=utf-8"},
        {"100%.txt", "/100%25.txt", "text/plain; charset=utf-8"},
        {"a+b.txt", "/a+b.txt", "text/plain; charset=utf-8"},  // '+' is a literal plus in a path
    };
    for (const Small& s : smalls) {
      // Each body is different and names its file, so a mix-up shows; a few bytes above 127 check binary safety.
      std::string body = std::string("file ") + s.name + " (" + s.type + ")\n";
      for (int i = 0; i < 300; ++i) body += static_cast<char>((i * 7 + static_cast<int>(body.size())) & 0xff);
      body += "\nend of " + std::string(s.name) + "\n";
      put(dir_ + "/" + s.name, body);
      files_.push_back({s.target, s.type, body});
    }
    sub_index_ = "<p>the index of sub/</p>\n";
    put(dir_ + "/sub/index.html", sub_index_);

    link("notes.txt", dir_ + "/link-to-notes.txt");
    files_.push_back({"/link-to-notes.txt", "text/plain; charset=utf-8", file("/notes.txt").body});
    link("../secret.txt", dir_ + "/link-to-secret");
    link("/etc/passwd", dir_ + "/link-to-passwd");
    link(parent_, dir_ + "/outside-dir");
    if (::mkfifo((dir_ + "/fifo").c_str(), 0644) != 0) return fail("mkfifo: " + errno_text(errno));

    make_big();
    make_sparse();
  }

  // 50 MiB of xorshift64* output from a fixed seed: the same bytes in every run, hashed as they are written.
  void make_big() {
    const std::string path = dir_ + "/big.bin";
    Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid()) return fail("open big.bin: " + errno_text(errno));
    std::uint64_t state = 0x9E3779B97F4A7C15ULL;
    Fnv1a hash;
    std::vector<char> chunk(1 << 20);
    for (std::uint64_t done = 0; done < kBigSize; done += chunk.size()) {
      for (std::size_t i = 0; i < chunk.size(); i += 8) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        const std::uint64_t v = state * 0x2545F4914F6CDD1DULL;
        std::memcpy(&chunk[i], &v, 8);
      }
      hash.add(chunk.data(), chunk.size());
      if (!write_all(fd.get(), chunk.data(), chunk.size())) return fail("write big.bin: " + errno_text(errno));
    }
    big_hash_ = hash.value();
    touch(fd.get());
  }

  void make_sparse() {
    const std::string path = dir_ + "/sparse.bin";
    Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid()) return fail("open sparse.bin: " + errno_text(errno));
    if (::ftruncate(fd.get(), static_cast<off_t>(kSparseSize)) != 0) fail("ftruncate sparse.bin: " + errno_text(errno));
    touch(fd.get());
  }

  static bool write_all(int fd, const char* data, std::size_t n) {
    while (n > 0) {
      const ssize_t w = ::write(fd, data, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      data += w;
      n -= static_cast<std::size_t>(w);
    }
    return true;
  }

  void put(const std::string& path, const std::string& body) {
    Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid() || !write_all(fd.get(), body.data(), body.size())) return fail("write " + path + ": " + errno_text(errno));
    touch(fd.get());
  }
  void mkdir(const std::string& path) {
    if (::mkdir(path.c_str(), 0755) != 0) fail("mkdir " + path + ": " + errno_text(errno));
  }
  void link(const std::string& target, const std::string& path) {
    if (::symlink(target.c_str(), path.c_str()) != 0) fail("symlink " + path + ": " + errno_text(errno));
  }
  // Every file's mtime, once written (Last-Modified; directories' mtimes are never sent).
  static void touch(int fd) {
    const timespec times[2] = {{kMtime, 0}, {kMtime, 0}};
    ::futimens(fd, times);
  }
  void fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
  }

  std::string error_;
  std::string parent_;
  std::string dir_;
  std::string marker_;
  std::vector<ServedFile> files_;
  std::string sub_index_;
  std::uint64_t big_hash_ = 0;
};

// The folder, built on first use (a few hundred ms: the 50 MiB file) and removed when the test process exits.
inline const StaticRoot& static_root() {
  static const StaticRoot root;
  return root;
}

// One response read as it arrives: the head parsed, the body digested (FNV-1a, or a check that it is all zeros
// for the 5 GiB file) and never kept whole, so a file of any size can be checked with constant memory.
//
//   [head] --whole head parsed--> [body] --Content-Length bytes digested--> [done]
//      \__________________ EOF, reset, malformed head __________________--> [failed]
class Download {
 public:
  enum class State { head, body, done, failed };
  enum class Digest { fnv1a, zeros };

  Download() = default;
  Download(Client client, bool head_request, Digest digest = Digest::fnv1a)
      : client_(std::move(client)), head_request_(head_request), digest_(digest) {}

  Client& client() { return client_; }
  State state() const { return state_; }
  bool finished() const { return state_ == State::done || state_ == State::failed; }
  const HttpResponse& response() const { return response_; }  // its body stays empty
  std::uint64_t length() const { return length_; }              // the body's announced length
  std::uint64_t received() const { return received_; }          // body bytes so far
  std::uint64_t hash() const { return hash_.value(); }
  std::uint64_t nonzero_bytes() const { return nonzero_; }
  const std::string& error() const { return error_; }

  // Reads what has arrived, at most `max_body` body bytes, without blocking; call it when the socket is readable.
  // Returns the body bytes taken.
  std::uint64_t on_readable(std::uint64_t max_body = UINT64_MAX) {
    if (state_ == State::head) {
      const bool open = client_.read_available();
      std::string err;
      switch (client_.take_response(/*head=*/true, response_, err)) {
        case Parse::malformed: return fail(err), 0;
        case Parse::need_more:
          if (!open) fail(client_.describe_end("before a whole response head arrived"));
          return 0;
        case Parse::complete: break;
      }
      if (!head_request_ && response_.status != 304 && !response_.header("Content-Length"))
        return fail("a file's response without Content-Length: this download needs its length\n" +
                    response_.head_text()), 0;
      length_ = head_request_ || response_.status == 304 ? 0 : std::stoull(*response_.header("Content-Length"));
      state_ = State::body;
      const std::string early = client_.take_buffered();  // body bytes that came with the head
      if (early.size() > length_) return fail("more bytes than the Content-Length: " + Client::preview(early)), 0;
      digest(early.data(), early.size());
      if (received_ == length_) state_ = State::done;
      return early.size();
    }
    if (state_ != State::body) return 0;
    static thread_local std::vector<char> buffer(1 << 20);
    std::uint64_t taken = 0;
    while (taken < max_body && received_ < length_) {
      const std::size_t want = static_cast<std::size_t>(
          std::min<std::uint64_t>({buffer.size(), length_ - received_, max_body - taken}));
      const ssize_t n = ::recv(client_.fd(), buffer.data(), want, 0);
      if (n > 0) {
        digest(buffer.data(), static_cast<std::size_t>(n));
        taken += static_cast<std::uint64_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      fail(n == 0 ? "EOF after " + std::to_string(received_) + " of " + std::to_string(length_) + " body bytes"
                  : "recv after " + std::to_string(received_) + " body bytes: " + errno_text(errno));
      return taken;
    }
    if (received_ == length_) state_ = State::done;
    return taken;
  }

  // Blocks (poll) until done or failed; false on failure or at the deadline (error() says which).
  bool finish(Deadline deadline) {
    while (!finished()) {
      pollfd p{client_.fd(), POLLIN, 0};
      if (::poll(&p, 1, poll_timeout_ms(deadline)) == 0) {
        if (state_ == State::head)  // no length to speak of yet: say what did come
          fail("timed out waiting for the response head; received so far: " + Client::preview(client_.buffered()));
        else
          fail("timed out after " + std::to_string(received_) + " of " + std::to_string(length_) + " body bytes");
        break;
      }
      on_readable();
    }
    return state_ == State::done;
  }

 private:
  void digest(const char* data, std::size_t n) {
    received_ += n;
    if (digest_ == Digest::fnv1a) {
      hash_.add(data, n);
      return;
    }
    // Zeros: whole 8-byte words first, the rest byte by byte (fast enough for 5 GiB).
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      std::uint64_t w;
      std::memcpy(&w, data + i, 8);
      if (w != 0)
        for (int b = 0; b < 8; ++b) nonzero_ += data[i + static_cast<std::size_t>(b)] != 0;
    }
    for (; i < n; ++i) nonzero_ += data[i] != 0;
  }
  void fail(std::string why) {
    state_ = State::failed;
    error_ = std::move(why);
  }

  Client client_;
  bool head_request_ = false;
  Digest digest_ = Digest::fnv1a;
  State state_ = State::head;
  HttpResponse response_;
  std::uint64_t length_ = 0;
  std::uint64_t received_ = 0;
  Fnv1a hash_;
  std::uint64_t nonzero_ = 0;
  std::string error_;
};

}  // namespace psp::test
