// Joining a job: from an init method (as torch.distributed.init_process_group takes one) to a
// connected Store plus this process's rank, after every rank has joined. Rank 0 serves the
// TcpStore for "env://" and "tcp://".
#pragma once

#include <memory>
#include <string>

#include "distributed/store/store.h"

namespace kiln::dist {

struct Rendezvous {
  std::shared_ptr<Store> store;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // rank among the processes on this node
  int local_world_size = 1;  // processes on this node
};

/// Connects this process to the job described by `init_method` and waits until all
/// `world_size` ranks have joined (at most `timeout`, which also becomes the store's timeout):
///   "env://"          MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE from the environment
///   "tcp://HOST:PORT" the store at HOST:PORT ("[v6addr]:PORT" for IPv6); RANK and WORLD_SIZE
///                     from the arguments or the environment
///   "file:///PATH"    a FileStore at the absolute PATH (fresh per job; see FileStore)
/// `rank` / `world_size` >= 0 override RANK / WORLD_SIZE. LOCAL_RANK and LOCAL_WORLD_SIZE come
/// from the environment when set (the launcher sets them), else they equal rank and world
/// size (one node). Throws kiln::Error naming the variable and its value when one is missing
/// or malformed, and saying how many of how many ranks joined when the timeout passes.
Rendezvous rendezvous(const std::string& init_method, int rank = -1, int world_size = -1,
                      Millis timeout = kDefaultStoreTimeout);

/// A TCP port free on 127.0.0.1 right now (bound to port 0 and released), for tests and for a
/// single-node launcher picking MASTER_PORT. Another process may take it before it is used.
int free_tcp_port();

}  // namespace kiln::dist
