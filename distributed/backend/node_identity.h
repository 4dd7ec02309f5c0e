// Which node a process is on, as far as shared memory is concerned: the host (its name and boot
// id: the same name on another machine differs) and the node rank the launcher gave it
// (GROUP_RANK). Two launchers on one machine with different --node-rank are different nodes
// (as are network namespaces standing in for machines): their ranks talk over TCP, never
// through one host's shared memory.
#pragma once

#include <string>

namespace kiln::dist {

/// "hostname/boot-id/node-rank"; equal for exactly the processes that may share memory.
std::string node_identity();

}  // namespace kiln::dist
