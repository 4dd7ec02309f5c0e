// File layout: the 8-byte header "KILNFS" + u16 version, then records, integers little-endian:
//   u8 type; SET: u32 key length, key, u32 value length, value; DELETE: u32 key length, key;
//   JOIN / LEAVE: nothing (an instance opened / closed the file, for deleting it at the end).
// Records are only ever appended, under the exclusive lock, at the end of the last complete
// record: bytes past that end are the torn write of a process that died mid-append, and the
// next writer cuts them off.
#include "distributed/store/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include "core/error.h"
#include "distributed/store/errors.h"
#include "distributed/store/store_value.h"
#include "distributed/store/tcp_store_protocol.h"

namespace kiln::dist {
namespace {

constexpr uint8_t kHeader[8] = {'K', 'I', 'L', 'N', 'F', 'S', 1, 0};

}  // namespace

/// flock() held for a scope. Exclusive always: a reader may need to cut off a torn tail.
class FileStore::Lock {
 public:
  Lock(int fd, const std::string& path) : fd_(fd) {
    while (flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) fail("FileStore \"{}\": flock failed: {}", path, errno_text(errno));
  }
  ~Lock() { flock(fd_, LOCK_UN); }  // closing the file would release it anyway
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

 private:
  int fd_;
};

namespace {

void pwrite_all(int fd, const uint8_t* p, size_t n, off_t at, const std::string& path) {
  while (n > 0) {
    ssize_t k = ::pwrite(fd, p, n, at);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) fail("FileStore \"{}\": write failed: {}", path, errno_text(k < 0 ? errno : EIO));
    p += k;
    n -= static_cast<size_t>(k);
    at += k;
  }
}

void pread_all(int fd, uint8_t* p, size_t n, off_t at, const std::string& path) {
  while (n > 0) {
    ssize_t k = ::pread(fd, p, n, at);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) fail("FileStore \"{}\": read failed: {}", path, errno_text(errno));
    if (k == 0) fail("FileStore \"{}\": the file shrank while locked", path);
    p += k;
    n -= static_cast<size_t>(k);
    at += k;
  }
}

struct Parsed {
  uint8_t type;
  std::string key;
  Bytes value;
  size_t size;  // bytes the record occupies
};

// The record at p[0..n), or nullopt if it is cut short. Throws on an unknown record type.
std::optional<Parsed> parse_record(const uint8_t* p, size_t n, const std::string& path, off_t at) {
  if (n < 1) return std::nullopt;
  Parsed r{p[0], {}, {}, 1};
  if (r.type < 1 || r.type > 4)
    fail("FileStore \"{}\": corrupt record at byte {} (type {}); the file is not usable as a store", path, at,
         static_cast<int>(r.type));
  auto field = [&](auto& out) {
    if (n - r.size < 4) return false;
    uint32_t len = wire::get_u32(p + r.size);
    if (n - r.size - 4 < len) return false;
    out.assign(p + r.size + 4, p + r.size + 4 + len);
    r.size += 4 + size_t{len};
    return true;
  };
  if (r.type == 1 || r.type == 2) {
    if (!field(r.key)) return std::nullopt;
  }
  if (r.type == 1) {
    if (!field(r.value)) return std::nullopt;
  }
  return r;
}

}  // namespace

FileStore::FileStore(std::string path, int world_size, Millis timeout)
    : path_(std::move(path)), world_size_(world_size) {
  timeout_ = std::max(timeout, Millis(0));
  KILN_CHECK(!path_.empty(), "FileStore: the path is empty");
  fd_.reset(::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd_.valid()) fail("FileStore: cannot open \"{}\": {}", path_, errno_text(errno));
  std::lock_guard<std::mutex> g(mu_);
  Lock lock(fd_.get(), path_);
  refresh_locked();
  if (world_size_ > 0) append_locked(Record::kJoin);
}

FileStore::~FileStore() {
  if (world_size_ <= 0) return;
  try {
    std::lock_guard<std::mutex> g(mu_);
    Lock lock(fd_.get(), path_);
    refresh_locked();
    append_locked(Record::kLeave);
    // Unlinked while still locked, so nobody appends to a file that is about to vanish.
    if (joined_ >= world_size_ && left_ >= joined_ && ::unlink(path_.c_str()) != 0 && errno != ENOENT)
      std::fprintf(stderr, "kiln FileStore: could not delete \"%s\": %s\n", path_.c_str(), errno_text(errno).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln FileStore: closing \"%s\": %s\n", path_.c_str(), e.what());
  }
}

void FileStore::refresh_locked() {
  struct stat st {};
  if (fstat(fd_.get(), &st) != 0) fail("FileStore \"{}\": fstat failed: {}", path_, errno_text(errno));
  if (st.st_nlink == 0)
    fail("FileStore \"{}\": the file was deleted while in use (all {} ranks had already left?)", path_, world_size_);
  off_t size = st.st_size;
  if (size < read_off_) {
    // Someone rewrote the file under us: forget what we knew and read it again.
    cache_.clear();
    joined_ = left_ = 0;
    read_off_ = 0;
  }
  if (read_off_ == 0) {
    uint8_t head[sizeof kHeader] = {};
    const size_t have = static_cast<size_t>(std::min<off_t>(size, sizeof kHeader));
    pread_all(fd_.get(), head, have, 0, path_);
    if (!std::equal(head, head + have, kHeader))
      fail("FileStore \"{}\": the file exists but is not a Kiln FileStore (wrong header); remove it or pick another "
           "path",
           path_);
    if (have < sizeof kHeader) {
      // New, or its creator died while writing the header.
      pwrite_all(fd_.get(), kHeader, sizeof kHeader, 0, path_);
      size = sizeof kHeader;
    }
    read_off_ = sizeof kHeader;
  }
  if (size == read_off_) return;
  std::vector<uint8_t> buf(static_cast<size_t>(size - read_off_));
  pread_all(fd_.get(), buf.data(), buf.size(), read_off_, path_);
  size_t pos = 0;
  while (auto r = parse_record(buf.data() + pos, buf.size() - pos, path_, read_off_ + static_cast<off_t>(pos))) {
    switch (static_cast<Record>(r->type)) {
      case Record::kSet: cache_[r->key] = std::move(r->value); break;
      case Record::kDelete: cache_.erase(r->key); break;
      case Record::kJoin: ++joined_; break;
      case Record::kLeave: ++left_; break;
    }
    pos += r->size;
  }
  read_off_ += static_cast<off_t>(pos);
  if (read_off_ < size && ftruncate(fd_.get(), read_off_) != 0)
    fail("FileStore \"{}\": cutting off a torn record failed: {}", path_, errno_text(errno));
}

void FileStore::append_locked(Record type, const std::string& key, const Bytes& value) {
  wire::Writer w;  // only for its encoding; the length prefix it reserves is skipped below
  w.u8(static_cast<uint8_t>(type));
  if (type == Record::kSet || type == Record::kDelete) w.str(key);
  if (type == Record::kSet) w.bytes(value.data(), value.size());
  std::vector<uint8_t> rec = w.finish();
  pwrite_all(fd_.get(), rec.data() + 4, rec.size() - 4, read_off_, path_);
  read_off_ += static_cast<off_t>(rec.size() - 4);
  switch (type) {
    case Record::kSet: cache_[key] = value; break;
    case Record::kDelete: cache_.erase(key); break;
    case Record::kJoin: ++joined_; break;
    case Record::kLeave: ++left_; break;
  }
}

bool FileStore::present_locked(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return cache_.count(k) != 0; });
}

void FileStore::poll_until(const std::vector<std::string>& keys, Millis timeout, const std::string& what,
                           const std::function<void()>& f) {
  const Clock::time_point deadline = deadline_after(timeout);
  std::chrono::milliseconds nap{1};
  for (;;) {
    {
      std::lock_guard<std::mutex> g(mu_);
      Lock lock(fd_.get(), path_);
      refresh_locked();
      if (present_locked(keys)) return f();
      if (Clock::now() >= deadline) {
        std::vector<std::string> missing;
        for (const auto& k : keys)
          if (!cache_.count(k)) missing.push_back(k);
        KILN_DIST_FAIL(TimeoutError, "FileStore {}: timed out after {} ms waiting for {} {}{} in \"{}\"", what,
                       timeout.count(), keys.size() == 1 ? "key" : "keys", quoted_keys(keys),
                       keys.size() == 1 ? "" : fmt::format(" (still missing: {})", quoted_keys(missing)), path_);
      }
    }
    // Polling is the price of a plain file; the nap grows so an idle wait costs little.
    std::this_thread::sleep_for(std::min<Clock::duration>(nap, deadline - Clock::now()));
    nap = std::min(nap * 2, std::chrono::milliseconds(20));
  }
}

void FileStore::set(const std::string& key, const Bytes& value) {
  std::lock_guard<std::mutex> g(mu_);
  Lock lock(fd_.get(), path_);
  refresh_locked();
  append_locked(Record::kSet, key, value);
}

Bytes FileStore::get(const std::string& key) {
  Bytes out;
  poll_until({key}, timeout_, fmt::format("get(\"{}\")", key), [&] { out = cache_.at(key); });
  return out;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> g(mu_);
  Lock lock(fd_.get(), path_);
  refresh_locked();
  auto it = cache_.find(key);
  int64_t sum = 0;
  try {
    sum = added_value(key, it == cache_.end() ? nullptr : &it->second, delta);
  } catch (const Error& e) {
    fail("FileStore \"{}\": {}", path_, e.what());
  }
  append_locked(Record::kSet, key, int_value(sum));
  return sum;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> g(mu_);
  Lock lock(fd_.get(), path_);
  refresh_locked();
  return present_locked(keys);
}

void FileStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  poll_until(keys, std::max(timeout, Millis(0)), fmt::format("wait([{}])", quoted_keys(keys)), [] {});
}

bool FileStore::remove(const std::string& key) {
  std::lock_guard<std::mutex> g(mu_);
  Lock lock(fd_.get(), path_);
  refresh_locked();
  if (!cache_.count(key)) return false;
  append_locked(Record::kDelete, key);
  return true;
}

}  // namespace kiln::dist
