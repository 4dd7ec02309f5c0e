// A Store in one file on a filesystem every rank shares (local disk, or a network filesystem
// whose flock() works). Writers append records under an exclusive flock(), so `add` is atomic
// across processes; each instance caches the map and reads only what was appended since its
// last look. Blocking calls poll the file with a short sleep.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <sys/types.h>
#include <unordered_map>
#include <vector>

#include "distributed/store/socket_util.h"
#include "distributed/store/store.h"

namespace kiln::dist {

class FileStore final : public Store {
 public:
  /// Opens (creating if absent) the store file at `path`; its directory must exist. When
  /// `world_size` > 0 the file is deleted once `world_size` instances have opened it and all of
  /// them have been destroyed, so a later job starts afresh; with world_size <= 0 (an observer)
  /// the instance does not count and the file is left in place. Use a fresh path per job: keys
  /// left by an earlier job that crashed would be read as this job's.
  FileStore(std::string path, int world_size, Millis timeout = kDefaultStoreTimeout);
  ~FileStore() override;
  FileStore(const FileStore&) = delete;
  FileStore& operator=(const FileStore&) = delete;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  bool remove(const std::string& key) override;
  using Store::get_string;
  using Store::set;
  using Store::wait;

  const std::string& path() const { return path_; }

 private:
  class Lock;
  enum class Record : uint8_t { kSet = 1, kDelete = 2, kJoin = 3, kLeave = 4 };

  // These three run under mu_ and the file lock.
  void refresh_locked();
  void append_locked(Record type, const std::string& key = {}, const Bytes& value = {});
  bool present_locked(const std::vector<std::string>& keys) const;
  // Polls until every key is present, then runs `f` under mu_ and the file lock. Throws
  // naming `what`, the missing keys and the file when `timeout` passes first.
  void poll_until(const std::vector<std::string>& keys, Millis timeout, const std::string& what,
                  const std::function<void()>& f);

  std::string path_;
  int world_size_;
  Fd fd_;
  // flock() excludes other open files, not threads sharing this one: threads take mu_ first.
  std::mutex mu_;
  std::unordered_map<std::string, Bytes> cache_;
  off_t read_off_ = 0;  // end of the last complete record read
  int64_t joined_ = 0, left_ = 0;
};

}  // namespace kiln::dist
