#include "distributed/backend/shm_p2p.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "core/parallel.h"
#include "distributed/store/errors.h"
#include "distributed/backend/node_identity.h"

namespace kiln::dist {
namespace {

// The segment: a header page, then the ring written by the lower rank (side 0), then the one
// written by the higher rank (side 1).
struct Side {
  alignas(64) std::atomic<uint32_t> bell;  // bumped by the peer: data arrived, or space freed
  std::atomic<uint32_t> sleepers;          // this side's threads in futex_wait on `bell`
};
struct Ring {
  alignas(64) std::atomic<uint64_t> tail;  // bytes written, ever (the writer's)
  std::atomic<uint32_t> blocked;           // the writer has bytes it could not fit
  alignas(64) std::atomic<uint64_t> head;  // bytes read, ever (the reader's)
};
struct Header {
  Side side[2];
  Ring ring[2];
};
constexpr size_t kHeaderBytes = 4096;
static_assert(sizeof(Header) <= kHeaderBytes, "the header fits its page");
static_assert(std::atomic<uint32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "shared atomics must be lock-free");

struct MsgHeader {
  uint64_t tag;
  uint64_t bytes;
};
constexpr size_t kMsgHeader = sizeof(MsgHeader);
constexpr int kSpins = 256;
// How long a waiter polls its bell before it sleeps on the futex, while every rank of this host has
// a core for each of its compute threads (as NCCL's and MPI's progress loops poll). A sleeping
// rank's (v)CPU goes idle and waking it costs more than the sub-millisecond waits of a pipeline's
// steady state: on a 2-core VM the bubble 2 pipeline stages measured beyond their compute's replay
// fell from 1.0-2.9 points to 0.6-2.0 (five A/B pairs at load average 1.9-3.1, 2026-11-25; not yet
// re-measured on an idle machine).
// Oversubscribed, a spinner would take the core of the rank it waits for: it polls kSpins times.
constexpr long kDefaultSpinUs = 2000;

long spin_us_from_env() {
  const char* env = std::getenv("KILN_SHM_SPIN_US");
  if (env == nullptr || *env == '\0') return kDefaultSpinUs;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  KILN_CHECK(end != env && *end == '\0' && v >= 0 && v <= 1'000'000,
             "KILN_SHM_SPIN_US: '{}' is not a spin time in microseconds (0 to 1000000)", env);
  return static_cast<long>(v);
}

constexpr auto kTick = std::chrono::milliseconds(10);  // how often a sleeper looks at the clock and the peer

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

void ring_bell(Side& s) {
  s.bell.fetch_add(1, std::memory_order_seq_cst);
  if (s.sleepers.load(std::memory_order_seq_cst) > 0) futex(&s.bell, FUTEX_WAKE, INT32_MAX, nullptr);
}

void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

/// Gone, or a zombie (its parent has not reaped it yet, but it will never write again).
bool has_exited(int pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && (line[paren + 2] == 'Z' || line[paren + 2] == 'X');
}

}  // namespace

struct ShmP2P::Op {
  bool is_send;
  int peer;
  uint64_t tag;
  unsigned char* data;
  size_t bytes;
  std::shared_ptr<void> keep;
  size_t moved = 0;  // bytes of the message (header included, for a send) through the ring
  bool done = false;
  std::string error;  // set with done for a receive whose size does not match
};

namespace {
/// A message that arrived before a receive for it was posted.
struct Early {
  uint64_t tag;
  std::vector<unsigned char> bytes;
  bool complete = false;
  std::shared_ptr<ShmP2P::Op> claimed;  // a receive posted while it was still arriving
};
}  // namespace

struct ShmP2P::Channel {
  bool shm = false;
  int peer = -1, peer_pid = 0, me = 0;  // me: this rank's side (0 = the lower rank)
  void* base = nullptr;
  size_t bytes = 0, cap = 0;
  std::string name;  // unlinked again at close, in case the peer never mapped it
  Header* h = nullptr;
  unsigned char* out = nullptr;  // the ring this rank writes
  unsigned char* in = nullptr;   // the ring the peer writes
  std::deque<std::shared_ptr<Op>> sends;  // the front one is being written
  std::deque<std::shared_ptr<Op>> recvs;  // posted, not yet matched, in posting order
  std::deque<std::shared_ptr<Early>> early;
  // The message being read: into `into` (a matched receive) or `early_msg`.
  bool reading = false;
  MsgHeader cur{};
  size_t got = 0;
  std::shared_ptr<Op> into;
  std::shared_ptr<Early> early_msg;
  std::vector<unsigned char> discard;  // a message of the wrong size for its receive

  // n == 0 returns first: an empty message's pointer may be null, and memcpy's may never be.
  void copy_in(uint64_t pos, const unsigned char* src, size_t n) {
    if (n == 0) return;
    size_t off = pos & (cap - 1), first = std::min(n, cap - off);
    std::memcpy(out + off, src, first);
    std::memcpy(out, src + first, n - first);
  }
  void copy_out(uint64_t pos, unsigned char* dst, size_t n) const {
    if (n == 0) return;
    size_t off = pos & (cap - 1), first = std::min(n, cap - off);
    std::memcpy(dst, in + off, first);
    std::memcpy(dst + first, in, n - first);
  }
};

ShmP2P::ShmP2P(std::shared_ptr<Store> store, int rank, int size, size_t ring_bytes)
    : store_(std::move(store)),
      rank_(rank),
      size_(size),
      ring_bytes_(ring_bytes),
      spin_us_(spin_us_from_env()),
      cpus_(usable_cores()),
      channels_(size) {
  KILN_CHECK(ring_bytes >= 64 && (ring_bytes & (ring_bytes - 1)) == 0,
             "ShmP2P: the ring size {} is not a power of two of at least 64 bytes", ring_bytes);
  const char* env = std::getenv("KILN_SHM_P2P");
  if (env == nullptr || std::string(env) != "0") me_ = fmt::format("{} {}", node_identity(), getpid());
  store_->set(fmt::format("host/{}", rank_), me_);
  // Every channel now, while the store is certainly up: set up on first use, a rank whose peer
  // (or the store's host, rank 0) had already failed would get a store error instead of the
  // failure it is about to be told of. Mapping costs no memory until a ring is written.
  for (int peer = 0; peer < size_; ++peer)
    if (peer != rank_) connect(peer);
}

ShmP2P::~ShmP2P() {
  for (auto& ch : channels_)
    if (ch && ch->shm) {
      shm_unlink(ch->name.c_str());  // normally gone already (ENOENT)
      munmap(ch->base, ch->bytes);
    }
}

void ShmP2P::connect(int peer) {
  auto ch = std::make_unique<Channel>();
  ch->peer = peer;
  const std::string theirs = store_->get_string(fmt::format("host/{}", peer));
  std::string their_host, my_host;
  std::istringstream(theirs) >> their_host >> ch->peer_pid;
  std::istringstream(me_) >> my_host;
  if (!me_.empty() && !theirs.empty() && their_host == my_host) {
    const int lo = std::min(rank_, peer), hi = std::max(rank_, peer);
    ch->me = rank_ == lo ? 0 : 1;
    ch->cap = ring_bytes_;
    ch->bytes = kHeaderBytes + 2 * ring_bytes_;
    const std::string key = fmt::format("pair/{}-{}", lo, hi);
    // Whoever comes first creates the segment and publishes its name at once (it waits on
    // nothing in between), so the other's get below returns within a store round trip or two.
    const bool creator = store_->add(key, 1) == 1;
    std::string error;
    if (creator) {
      std::random_device rd;
      ch->name = fmt::format("/kiln-p2p-{}-{:x}", getpid(), (uint64_t{rd()} << 32) | rd());
      int fd = shm_open(ch->name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd >= 0 && ftruncate(fd, static_cast<off_t>(ch->bytes)) == 0)
        ch->base = mmap(nullptr, ch->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      else
        error = std::strerror(errno);
      if (fd >= 0) close(fd);
      if (ch->base == MAP_FAILED || ch->base == nullptr) {
        if (error.empty()) error = std::strerror(errno);
        shm_unlink(ch->name.c_str());
        ch->base = nullptr;
      }
      store_->set(key + "/name", ch->base ? ch->name : std::string());  // "": both use TCP
    } else {
      ch->name = store_->get_string(key + "/name");
      if (!ch->name.empty()) {
        int fd = shm_open(ch->name.c_str(), O_RDWR, 0600);
        if (fd >= 0) {
          void* p = mmap(nullptr, ch->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
          close(fd);
          if (p != MAP_FAILED) ch->base = p;
        }
        // The creator already uses the segment: falling back to TCP alone would hang both.
        if (!ch->base)
          fail("ShmP2P: rank {} cannot map the shared-memory channel {} that rank {} created for their "
               "transfers: {} (KILN_SHM_P2P=0 on every rank turns the channel off)",
               rank_, ch->name, peer, std::strerror(errno));
        shm_unlink(ch->name.c_str());  // both have it mapped now
      }
    }
    if (ch->base) {
      ch->shm = true;
      ch->h = static_cast<Header*>(ch->base);
      auto* rings = static_cast<unsigned char*>(ch->base) + kHeaderBytes;
      ch->out = rings + static_cast<size_t>(ch->me) * ch->cap;
      ch->in = rings + static_cast<size_t>(1 - ch->me) * ch->cap;
      open_.push_back(ch.get());
    }
  }
  channels_[peer] = std::move(ch);
}

bool ShmP2P::connects(int peer) const {
  KILN_CHECK(peer >= 0 && peer < size_ && peer != rank_, "ShmP2P: peer {} is not another rank of {}", peer, size_);
  return channels_[peer]->shm;
}

std::shared_ptr<ShmP2P::Op> ShmP2P::send(const void* data, size_t bytes, int peer, uint64_t tag,
                                         std::shared_ptr<void> keep) {
  auto op = std::make_shared<Op>(
      Op{true, peer, tag, static_cast<unsigned char*>(const_cast<void*>(data)), bytes, std::move(keep)});
  KILN_CHECK(connects(peer), "ShmP2P: send to rank {} is not over shared memory", peer);
  std::lock_guard<std::mutex> lock(mu_);
  Channel& ch = *channels_[peer];
  ch.sends.push_back(op);
  if (ch.sends.size() == 1) write_sends(ch);  // usually the whole message fits: done already
  return op;
}

std::shared_ptr<ShmP2P::Op> ShmP2P::recv(void* data, size_t bytes, int peer, uint64_t tag,
                                         std::shared_ptr<void> keep) {
  auto op = std::make_shared<Op>(Op{false, peer, tag, static_cast<unsigned char*>(data), bytes, std::move(keep)});
  KILN_CHECK(connects(peer), "ShmP2P: recv from rank {} is not over shared memory", peer);
  std::lock_guard<std::mutex> lock(mu_);
  Channel& ch = *channels_[peer];
  // The oldest unclaimed message of this tag that came early, if any.
  for (auto it = ch.early.begin(); it != ch.early.end(); ++it) {
    Early& e = **it;
    if (e.tag != tag || e.claimed) continue;
    e.claimed = op;
    if (e.complete) {
      deliver(ch);
    }
    return op;
  }
  ch.recvs.push_back(op);
  return op;
}

// Completed early messages that a receive has claimed: copied into it and dropped (in order).
void ShmP2P::deliver(Channel& ch) {
  for (auto it = ch.early.begin(); it != ch.early.end();) {
    Early& e = **it;
    if (!e.complete || !e.claimed) {
      ++it;
      continue;
    }
    Op& op = *e.claimed;
    if (op.bytes != e.bytes.size())
      op.error = fmt::format("recv from rank {} (tag {}): the buffer has {} bytes, the message {}", op.peer, op.tag,
                             op.bytes, e.bytes.size());
    else
      if (op.bytes > 0) std::memcpy(op.data, e.bytes.data(), op.bytes);
    op.done = true;
    op.keep.reset();
    it = ch.early.erase(it);
  }
}

bool ShmP2P::write_sends(Channel& ch) {
  Ring& r = ch.h->ring[ch.me];
  uint64_t tail = r.tail.load(std::memory_order_relaxed);
  uint64_t head = r.head.load(std::memory_order_acquire);
  const uint64_t start = tail;
  bool completed = false;
  while (!ch.sends.empty()) {
    Op& op = *ch.sends.front();
    const size_t total = kMsgHeader + op.bytes;
    while (op.moved < total) {
      const size_t space = ch.cap - static_cast<size_t>(tail - head);
      if (op.moved == 0) {  // the header goes in whole
        if (space < kMsgHeader) break;
        MsgHeader mh{op.tag, op.bytes};
        ch.copy_in(tail, reinterpret_cast<const unsigned char*>(&mh), kMsgHeader);
        tail += kMsgHeader;
        op.moved = kMsgHeader;
        continue;
      }
      const size_t n = std::min(space, total - op.moved);
      if (n == 0) break;
      ch.copy_in(tail, op.data + (op.moved - kMsgHeader), n);
      tail += n;
      op.moved += n;
    }
    if (op.moved < total) {
      // Ask the reader to ring when it frees space, then look once more (it may have freed
      // some just before it could see the request).
      r.blocked.store(1, std::memory_order_seq_cst);
      const uint64_t now = r.head.load(std::memory_order_seq_cst);
      if (now != head) {
        head = now;
        continue;
      }
      break;
    }
    op.done = true;
    op.keep.reset();
    ch.sends.pop_front();
    completed = true;
  }
  if (ch.sends.empty()) r.blocked.store(0, std::memory_order_relaxed);
  if (tail != start) {
    r.tail.store(tail, std::memory_order_seq_cst);
    ring_bell(ch.h->side[1 - ch.me]);
  }
  return completed;
}

bool ShmP2P::read_incoming(Channel& ch) {
  Ring& r = ch.h->ring[1 - ch.me];
  uint64_t head = r.head.load(std::memory_order_relaxed);
  const uint64_t tail = r.tail.load(std::memory_order_acquire);
  const uint64_t start = head;
  bool completed = false;
  while (true) {
    if (!ch.reading) {
      if (tail - head < kMsgHeader) break;
      ch.copy_out(head, reinterpret_cast<unsigned char*>(&ch.cur), kMsgHeader);
      head += kMsgHeader;
      ch.reading = true;
      ch.got = 0;
      auto match = std::find_if(ch.recvs.begin(), ch.recvs.end(), [&](const auto& o) { return o->tag == ch.cur.tag; });
      if (match != ch.recvs.end()) {
        ch.into = *match;
        ch.recvs.erase(match);
        if (ch.into->bytes != ch.cur.bytes) {
          ch.into->error = fmt::format("recv from rank {} (tag {}): the buffer has {} bytes, the message {}",
                                       ch.peer, ch.cur.tag, ch.into->bytes, ch.cur.bytes);
          ch.discard.resize(ch.cur.bytes);
        }
      } else {
        ch.early_msg = std::make_shared<Early>();
        ch.early_msg->tag = ch.cur.tag;
        ch.early_msg->bytes.resize(ch.cur.bytes);
        ch.early.push_back(ch.early_msg);
      }
    }
    const size_t n = std::min<size_t>(static_cast<size_t>(tail - head), ch.cur.bytes - ch.got);
    unsigned char* dst = ch.early_msg                ? ch.early_msg->bytes.data()
                         : !ch.into->error.empty() ? ch.discard.data()
                                                   : ch.into->data;
    ch.copy_out(head, dst + ch.got, n);
    head += n;
    ch.got += n;
    if (ch.got < ch.cur.bytes) break;  // the rest is still to come
    if (ch.into) {
      ch.into->done = true;
      ch.into->keep.reset();
      ch.into.reset();
      std::vector<unsigned char>().swap(ch.discard);
    } else {
      ch.early_msg->complete = true;
      ch.early_msg.reset();
      deliver(ch);
    }
    ch.reading = false;
    completed = true;
  }
  if (head != start) {
    r.head.store(head, std::memory_order_seq_cst);
    if (r.blocked.load(std::memory_order_seq_cst) != 0) ring_bell(ch.h->side[1 - ch.me]);
  }
  return completed;
}

bool ShmP2P::progress_locked() {
  bool completed = false;
  for (Channel* c : open_) {  // every channel: a peer blocked on a full ring is drained too
    completed |= read_incoming(*c);
    if (!c->sends.empty()) completed |= write_sends(*c);
  }
  return completed;
}

void ShmP2P::wait(Op& op, Millis timeout) {
  Channel* ch = channels_[op.peer].get();
  Side& mine = ch->h->side[ch->me];
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto last_look = std::chrono::steady_clock::now();
  while (true) {
    const uint32_t seq = mine.bell.load(std::memory_order_seq_cst);
    // A transfer on another channel still streaming a message larger than its ring (this rank
    // writing, or the peer waiting for this rank to drain): its bell is not the one slept on
    // below, so sleep briefly rather than a whole tick per ring-full.
    bool streaming_elsewhere = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // Another thread of this rank may sleep on an op this pass completes.
      if (progress_locked() && mine.sleepers.load(std::memory_order_seq_cst) > 0) ring_bell(mine);
      if (op.done) {
        if (!op.error.empty()) fail("{}", op.error);
        return;
      }
      for (Channel* c : open_)
        streaming_elsewhere |= c != ch && (!c->sends.empty() ||
                                           c->h->ring[1 - c->me].blocked.load(std::memory_order_seq_cst) != 0);
    }
    bool rang = false;
    const int local_ranks = static_cast<int>(open_.size()) + 1;
    const auto spin_until = std::chrono::steady_clock::now() +
                            std::chrono::microseconds(local_ranks * get_num_threads() <= cpus_ ? spin_us_ : 0);
    do {
      for (int i = 0; i < kSpins && !rang; ++i) {
        rang = mine.bell.load(std::memory_order_acquire) != seq;
        cpu_relax();
      }
    } while (!rang && std::chrono::steady_clock::now() < spin_until);
    if (rang) continue;
    const auto now = std::chrono::steady_clock::now();
    const char* what = op.is_send ? "send to" : "recv from";
    if (now > deadline)
      KILN_DIST_FAIL(TimeoutError, "{} rank {} (tag {}, {} bytes) over shared memory timed out after {} ms on rank {}",
                     what, op.peer, op.tag, op.bytes, timeout.count(), rank_);
    if (now - last_look >= kTick) {
      last_look = now;
      if (has_exited(ch->peer_pid)) {
        std::lock_guard<std::mutex> lock(mu_);
        progress_locked();  // what it wrote before it went is still good
        if (op.done && op.error.empty()) return;
        KILN_DIST_FAIL(PeerError, "{} rank {} (tag {}) over shared memory: rank {} (pid {}) has exited", what,
                       op.peer, op.tag, op.peer, ch->peer_pid);
      }
    }
    mine.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const timespec tick{0, streaming_elsewhere ? 100'000L
                                               : std::chrono::duration_cast<std::chrono::nanoseconds>(kTick).count()};
    futex(&mine.bell, FUTEX_WAIT, seq, &tick);
    mine.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace kiln::dist
