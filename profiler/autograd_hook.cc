// Backward nodes as "backward" events: the autograd engine calls the observer around each
// node's backward while a Profiler records (autograd/engine.cc).
#include <atomic>
#include <deque>
#include <string>
#include <vector>

#include "profiler/hooks.h"
#include "profiler/profiler.h"

namespace kiln::autograd::detail {
// Defined in autograd/engine.cc.
extern std::atomic<void (*)(const std::string& node_name, bool begin)> g_node_observer;
}  // namespace kiln::autograd::detail

namespace kiln::profiler::detail {
namespace {

struct OpenNode {
  std::string name;
  int64_t start;
};
thread_local std::deque<OpenNode> t_open;  // a deque: names stay put while scopes point at them

void observe(const std::string& name, bool begin) {
  if (begin) {
    t_open.push_back({name, now_ns()});
    push_scope(t_open.back().name.c_str());
    return;
  }
  if (t_open.empty()) return;  // began before the profiler started
  pop_scope();
  Event e;
  e.name = std::move(t_open.back().name);
  e.category = "backward";
  e.start_ns = t_open.back().start;
  t_open.pop_back();
  e.end_ns = now_ns();
  record(std::move(e));
}

}  // namespace

void install_autograd_hook() { autograd::detail::g_node_observer.store(&observe); }
void remove_autograd_hook() { autograd::detail::g_node_observer.store(nullptr); }

}  // namespace kiln::profiler::detail
