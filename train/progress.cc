#include "train/progress.h"

#include <fmt/format.h>

#include <cmath>

namespace kiln::train {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

double eta_seconds(const Progress& p) {
  if (p.run_steps <= 0) return std::nan("");
  return p.elapsed_s / static_cast<double>(p.run_steps) * static_cast<double>(p.total_steps - p.step);
}

std::string progress_line(const Progress& p) {
  return fmt::format("step {}/{} epoch {}/{} loss {:.4f} {:.0f} samples/s elapsed {} eta {}", p.step, p.total_steps,
                     p.epoch, p.epochs, p.loss, p.samples_per_sec, format_duration(p.elapsed_s),
                     format_duration(eta_seconds(p)));
}

}  // namespace kiln::train
