#include "distributed/backend/arrival_log.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>

namespace kiln::dist {
namespace {
std::string key(int rank) { return fmt::format("arrived/{}", rank); }
std::string beat_key(int rank) { return fmt::format("beat/{}", rank); }

// A live rank bumps its heartbeat this often, even when it enters no collective (a rank busy
// in a long backward is alive); a failure report waits a few beats before calling a peer dead.
constexpr auto kBeat = std::chrono::milliseconds(500);
constexpr auto kSilentAfter = std::chrono::milliseconds(2500);
}  // namespace

ArrivalLog::ArrivalLog(std::shared_ptr<Store> store, int rank, int size, Millis linger)
    : store_(std::move(store)), rank_(rank), size_(size), linger_(linger), publisher_([this] { publish_loop(); }) {}

ArrivalLog::~ArrivalLog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  publisher_.join();
}

void ArrivalLog::entered(uint64_t seq) {
  entered_.store(seq, std::memory_order_relaxed);
  cv_.notify_one();
}

void ArrivalLog::publish_loop() {
  // At most one store round trip per kMinInterval: a burst of small collectives must not pay a
  // round trip (and two thread wake-ups on a busy machine) each. A failure waits longer than
  // this for the others' entries, so only a rank that died in the last interval can look a
  // collective or two behind.
  constexpr auto kMinInterval = std::chrono::milliseconds(20);
  std::unique_lock<std::mutex> lock(mu_);
  auto next_beat = std::chrono::steady_clock::now();
  while (true) {
    cv_.wait_until(lock, next_beat, [&] { return stop_ || entered_.load(std::memory_order_relaxed) != published_; });
    if (stop_) return;
    uint64_t seq = entered_.load(std::memory_order_relaxed);
    const bool beat = std::chrono::steady_clock::now() >= next_beat;
    lock.unlock();
    try {
      if (seq != published_) store_->set(key(rank_), std::to_string(seq));
      if (beat) store_->add(beat_key(rank_), 1);
    } catch (const std::exception&) {
      // The store is gone (its rank died): failures are reported by the collectives themselves.
    }
    lock.lock();
    if (beat) next_beat = std::chrono::steady_clock::now() + kBeat;
    published_ = seq;
    cv_.wait_for(lock, kMinInterval, [&] { return stop_ || urgent_; });
    urgent_ = false;
  }
}

int64_t ArrivalLog::published_seq(int rank) {
  if (!store_->check({key(rank)})) return 0;
  return std::stoll(store_->get_string(key(rank)));
}

std::vector<int> ArrivalLog::missing(uint64_t seq, Millis grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    urgent_ = true;  // publish now, not at the next interval
  }
  entered(seq);
  auto deadline = std::chrono::steady_clock::now() + grace;
  while (true) {
    std::vector<int> late;
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && published_seq(r) < static_cast<int64_t>(seq)) late.push_back(r);
    if (late.empty() || std::chrono::steady_clock::now() >= deadline) return late;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<int> ArrivalLog::silent(const std::vector<int>& ignore) {
  std::vector<int> ranks;
  std::vector<int64_t> first;
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && std::find(ignore.begin(), ignore.end(), r) == ignore.end()) {
      ranks.push_back(r);
      first.push_back(store_->add(beat_key(r), 0));
    }
  const auto deadline = std::chrono::steady_clock::now() + kSilentAfter;
  while (true) {
    std::vector<int> quiet;
    for (size_t i = 0; i < ranks.size(); ++i)
      if (store_->add(beat_key(ranks[i]), 0) == first[i]) quiet.push_back(ranks[i]);
    if (quiet.empty() || std::chrono::steady_clock::now() >= deadline) return quiet;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::string ArrivalLog::describe_failure(const std::string& name, uint64_t seq, double seconds,
                                         const std::string& cause) {
  std::string who;
  try {
    std::vector<int> late = missing(seq, Millis(500));
    // Ranks that died (a lost node: some may have entered it first) are named by their silence.
    std::vector<int> dead = silent({});
    if (late.empty()) {
      who = "every rank entered it";
    } else {
      std::vector<std::string> last;
      for (int r : late) last.push_back(fmt::format("rank {} last entered #{}", r, published_seq(r)));
      who = fmt::format("ranks {} did not arrive ({})", late, fmt::join(last, ", "));
    }
    if (!dead.empty())
      who += fmt::format("{}ranks {} stopped responding (no heartbeat for {:.1f} s)", late.empty() ? ", but " : "; ",
                         dead, std::chrono::duration<double>(kSilentAfter).count());
    for (int r : dead)
      if (std::find(late.begin(), late.end(), r) == late.end()) late.push_back(r);
    // Rank 0 hosts the store: it stays up (bounded) until the other ranks that got here have
    // read what they need from it.
    const std::string described = fmt::format("described/{}", seq);
    int64_t count = store_->add(described, 1);
    const auto until = std::chrono::steady_clock::now() + linger_;
    while (rank_ == 0 && count < size_ - static_cast<int64_t>(late.size()) &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      count = store_->add(described, 0);
    }
  } catch (const std::exception& e) {
    if (who.empty()) who = fmt::format("could not ask the store which ranks arrived ({})", e.what());
  }
  return fmt::format("{} #{} failed after {:.1f} s on rank {}: {}; cause: {}", name, seq, seconds, rank_, who,
                     cause);
}

}  // namespace kiln::dist
