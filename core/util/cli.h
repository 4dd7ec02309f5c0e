// Command-line flags for Kiln's programs (the main job, the launcher, the benchmarks) through
// CLI11: each flag is declared once with its type and its range or choices, and a bad command
// line exits 2 with a message naming the flag and the value (never a silent 0 from atoi).
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>
#include <type_traits>
#include <vector>

namespace kiln::cli {

/// A CLI11 app whose --help shows every option's default value, and where a flag given twice
/// takes its last value (as Kiln's hand-written parsers did).
class App : public CLI::App {
 public:
  App(std::string description, std::string name) : CLI::App(std::move(description), std::move(name)) {
    option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
};

/// A CLI11 check: the value is a base-10 integer (for integral T) or a finite number (for
/// floating T) in [min, max]. Messages: "--epochs: expects an integer, got 'three'",
/// "--epochs: must be in [1, 1000], got 0".
template <class T>
CLI::Validator range(T min, T max) {
  static_assert(std::is_arithmetic_v<T>);
  auto check = [min, max](std::string& s) -> std::string {
    T v{};
    if constexpr (std::is_integral_v<T>) {
      auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
      if (ec == std::errc::result_out_of_range)
        return fmt::format("expects an integer in [{}, {}], got '{}'", min, max, s);
      if (s.empty() || ec != std::errc() || end != s.data() + s.size())
        return fmt::format("expects an integer, got '{}'", s);
    } else {
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(d))
        return fmt::format("expects a number, got '{}'", s);
      v = static_cast<T>(d);
    }
    if (v < min || v > max) return fmt::format("must be in [{}, {}], got {}", min, max, s);
    return {};
  };
  return CLI::Validator(check, fmt::format("in [{}, {}]", min, max), "kiln::cli::range");
}

/// A CLI11 check: the value is one of `choices`. Message: "--model: must be one of mlp|cnn,
/// got 'resnet'".
inline CLI::Validator one_of(std::vector<std::string> choices) {
  const std::string joined = fmt::format("{}", fmt::join(choices, "|"));
  auto check = [choices, joined](std::string& s) -> std::string {
    for (const std::string& c : choices)
      if (c == s) return {};
    return fmt::format("must be one of {}, got '{}'", joined, s);
  };
  return CLI::Validator(check, joined, "kiln::cli::one_of");
}

/// A CLI11 check by a parser: the value is valid when `parse(value)` does not throw, else the
/// exception's message is the error (`--device: Device: unknown device 'tpu'`).
template <class Parse>
CLI::Validator accepted_by(Parse parse, std::string description = "") {
  auto check = [parse](std::string& s) -> std::string {
    try {
      parse(s);
      return {};
    } catch (const std::exception& e) {
      return e.what();
    }
  };
  return CLI::Validator(check, std::move(description), "kiln::cli::accepted_by");
}

/// Parses argv into `app`'s flags. Returns -1 when the program should go on, else the code to
/// exit with: 0 after printing --help, 2 after a bad command line (the message on stderr,
/// prefixed with the program's name).
inline int parse(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help: the help text on stdout
    std::cerr << app.get_name() << ": " << e.what() << "\nRun with --help for the flags.\n";
    return 2;
  }
}

/// The same for a bad combination of flags found after parsing: prints and returns 2.
inline int usage_error(const CLI::App& app, const std::string& message) {
  std::cerr << app.get_name() << ": " << message << "\nRun with --help for the flags.\n";
  return 2;
}

}  // namespace kiln::cli
