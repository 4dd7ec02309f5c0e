// The flight recorder tool: reads every rank's dump and names the ranks behind and the
// collectives that disagree.
//   tools/bazel run //distributed/debug:flight_recorder -- /tmp/kiln_flight_recorder
#include <cstdio>
#include <iostream>

#include "core/util/cli.h"
#include "distributed/debug/flight_recorder_analysis.h"

int main(int argc, char** argv) {
  kiln::cli::App app("Reads the flight recorder dumps of every rank (flight_recorder.rank*.json) and says which "
                     "rank is behind, at which collective, and which collectives disagree between ranks.",
                     "flight_recorder");
  std::vector<std::string> inputs;
  app.add_option("dumps", inputs, "a directory of dumps, or the dump files")->required();
  if (int rc = kiln::cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    kiln::dist::FlightReport r = kiln::dist::analyze_flight_records(kiln::dist::read_flight_records(inputs));
    std::cout << r.text();
    return r.findings.empty() ? 0 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flight_recorder: %s\n", e.what());
    return 1;
  }
}
