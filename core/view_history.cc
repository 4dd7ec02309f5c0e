#include "core/view_history.h"

namespace kiln::detail {

ViewHistoryHooks& view_history_hooks() {
  static ViewHistoryHooks hooks;
  return hooks;
}

}  // namespace kiln::detail
