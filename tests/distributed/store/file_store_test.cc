// FileStore across real processes sharing one file under TEST_TMPDIR.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "distributed/store/errors.h"
#include "distributed/store/file_store.h"
#include "tests/distributed/store/proc_util.h"
#include "tests/distributed/store/store_scenarios.h"

using namespace kiln::dist;
using namespace kiln::test;
using namespace std::chrono_literals;

namespace {

std::string store_path(const std::string& name) { return scratch_dir("file_store_" + name) + "/store"; }

std::string spec(const std::string& path, int members = 0) {
  return "file:" + std::to_string(members) + ":" + path;
}

void append_raw(const std::string& path, const std::vector<uint8_t>& bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

}  // namespace

TEST_CASE("three processes exchange values through one file, and the last member deletes it") {
  const std::string path = store_path("exchange");
  {
    // This process is the fourth member, so the file outlives the workers.
    FileStore store(path, 4, 120s);
    check_three_exchange(store, spec(path, 4), "fexchange");
    CHECK(std::filesystem::exists(path));
  }
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("adds from three processes are atomic under the file lock") {
  const std::string path = store_path("add");
  FileStore store(path, 0, 120s);
  check_atomic_adds(store, spec(path), "fadd");
}

TEST_CASE("get before set blocks, then returns the value") {
  const std::string path = store_path("get");
  FileStore store(path, 0, 120s);
  check_get_waits_for_set(store, spec(path), "fget");
}

TEST_CASE("wait and get time out with a message naming the keys and the file") {
  const std::string path = store_path("timeout");
  FileStore store(path, 0, 200ms);
  store.set("a", std::string("1"));
  auto t0 = std::chrono::steady_clock::now();
  std::string msg = error_of([&] { store.wait({"a", "nope"}, 300ms); });
  auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(contains(msg, "still missing: \"nope\""));
  CHECK(contains(msg, "300 ms"));
  CHECK(contains(msg, path));
  CHECK(waited >= 290ms);
  CHECK(waited < 30s);
  msg = error_of([&] { store.get("never"); });
  CHECK(contains(msg, "get(\"never\")"));
  CHECK(contains(msg, "200 ms"));
  CHECK_THROWS_AS(store.get("never"), TimeoutError);
}

TEST_CASE("check, remove, add and binary values") {
  const std::string path = store_path("ops");
  FileStore a(path, 0, 120s), b(path, 0, 120s);
  CHECK_FALSE(a.check({"k"}));
  b.set("k", std::string("v"));
  CHECK(a.check({"k"}));
  CHECK_FALSE(a.check({"k", "k2"}));
  CHECK(a.remove("k"));
  CHECK_FALSE(b.check({"k"}));
  CHECK_FALSE(b.remove("k"));
  CHECK(a.add("n", 5) == 5);
  CHECK(b.add("n", -7) == -2);
  CHECK(a.get_string("n") == "-2");
  b.set("text", std::string("abc"));
  std::string msg = error_of([&] { a.add("text", 1); });
  CHECK(contains(msg, "\"text\""));
  CHECK(contains(msg, "not a decimal integer"));
  Bytes bin(5000);
  for (size_t i = 0; i < bin.size(); ++i) bin[i] = static_cast<uint8_t>(i * 13 + 1);
  a.set("bin", bin);
  CHECK(b.get("bin") == bin);
  b.set("bin", Bytes{});
  CHECK(a.get("bin").empty());
}

TEST_CASE("a torn record left by a crashed writer is cut off and the store goes on") {
  const std::string path = store_path("torn");
  FileStore a(path, 0, 120s);
  a.set("before", std::string("ok"));
  // A SET record cut off inside its key, as a process killed mid-write would leave it.
  append_raw(path, {1, 10, 0, 0, 0, 'h', 'a'});
  FileStore b(path, 0, 120s);
  CHECK(b.get_string("before") == "ok");
  b.set("after", std::string("fine"));
  CHECK(a.get_string("after") == "fine");
  CHECK(a.get_string("before") == "ok");
  CHECK_FALSE(a.check({"ha"}));
}

TEST_CASE("files that are not stores, and missing directories, are refused by name") {
  const std::string dir = scratch_dir("file_store_bad");
  const std::string text = dir + "/notes.txt";
  write_bytes(text, {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'});
  std::string msg = error_of([&] { FileStore(text, 0, 1s); });
  CHECK(contains(msg, text));
  CHECK(contains(msg, "not a Kiln FileStore"));
  CHECK(read_bytes(text).size() == 11);  // left untouched

  msg = error_of([&] { FileStore(dir + "/no/such/dir/store", 0, 1s); });
  CHECK(contains(msg, dir + "/no/such/dir/store"));
  CHECK(contains(msg, "No such file or directory"));

  // A corrupt record type is an error naming the file and offset, not a silent misread.
  const std::string corrupt = dir + "/corrupt";
  { FileStore s(corrupt, 0, 1s); }
  append_raw(corrupt, {77, 0, 0});
  msg = error_of([&] { FileStore(corrupt, 0, 1s); });
  CHECK(contains(msg, "corrupt record at byte 8"));
}

TEST_CASE("threads sharing one FileStore are serialised") {
  const std::string path = store_path("threads");
  FileStore store(path, 0, 120s);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) store.add("shared", 1);
    });
  for (auto& t : threads) t.join();
  CHECK(store.add("shared", 0) == 400);
}
