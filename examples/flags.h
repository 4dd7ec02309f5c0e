// A small command-line flag parser for Kiln's example programs: `--name value` or
// `--name=value`, typed getters, and errors that name the flag and the bad value.
#pragma once

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::examples {

/// A bad command line; the message is meant for the user, followed by the usage text.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Flags {
 public:
  /// `known` lists the accepted flag names (without "--"); `switches` are flags without values.
  Flags(int argc, char** argv, const std::set<std::string>& known, const std::set<std::string>& switches = {});

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback) const;
  int64_t get_int(const std::string& name, int64_t fallback, int64_t min, int64_t max) const;
  double get_double(const std::string& name, double fallback, double min, double max) const;
  /// One of `choices`.
  std::string get_choice(const std::string& name, const std::string& fallback,
                         const std::vector<std::string>& choices) const;

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace kiln::examples
