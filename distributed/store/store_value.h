// How stores keep counters: `add` stores its sum as decimal text, so `get` of an added key
// reads e.g. "3". Shared by every Store implementation so they agree on format and errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "distributed/store/store.h"

namespace kiln::dist {

/// The sum `add(key, delta)` stores given the key's current value (`old` null when absent).
/// Throws kiln::Error naming the key if the value is not a decimal int64 or the sum overflows.
int64_t added_value(const std::string& key, const Bytes* old, int64_t delta);

/// Decimal text of `v`, as a stored value.
Bytes int_value(int64_t v);

/// `"a", "b"`: keys as error messages show them.
std::string quoted_keys(const std::vector<std::string>& keys);

}  // namespace kiln::dist
