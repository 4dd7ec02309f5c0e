#include "examples/flags.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kiln::examples {

Flags::Flags(int argc, char** argv, const std::set<std::string>& known, const std::set<std::string>& switches) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) throw UsageError(fmt::format("unexpected argument '{}'", arg));
    std::string name = arg.substr(2), value;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (!known.count(name) && !switches.count(name)) throw UsageError(fmt::format("unknown flag '--{}'", name));
    if (switches.count(name)) {
      if (eq != std::string::npos) throw UsageError(fmt::format("flag '--{}' takes no value", name));
      value = "1";
    } else if (eq == std::string::npos) {
      if (i + 1 >= argc) throw UsageError(fmt::format("flag '--{}' needs a value", name));
      value = argv[++i];
    }
    values_[name] = value;
  }
}

std::string Flags::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Flags::get_int(const std::string& name, int64_t fallback, int64_t min, int64_t max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& s = it->second;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size())
    throw UsageError(fmt::format("--{} expects an integer, got '{}'", name, s));
  if (v < min || v > max) throw UsageError(fmt::format("--{} must be in [{}, {}], got {}", name, min, max, v));
  return v;
}

double Flags::get_double(const std::string& name, double fallback, double min, double max) const {
  auto it = values_.find(name);
  if (it == values_.end()) return fallback;
  const std::string& s = it->second;
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(s, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != s.size() || s.empty() || !std::isfinite(v))
    throw UsageError(fmt::format("--{} expects a number, got '{}'", name, s));
  if (v < min || v > max) throw UsageError(fmt::format("--{} must be in [{}, {}], got {}", name, min, max, v));
  return v;
}

std::string Flags::get_choice(const std::string& name, const std::string& fallback,
                              const std::vector<std::string>& choices) const {
  std::string v = get(name, fallback);
  for (const auto& c : choices)
    if (c == v) return v;
  throw UsageError(fmt::format("--{} must be one of {}, got '{}'", name, fmt::join(choices, "|"), v));
}

}  // namespace kiln::examples
