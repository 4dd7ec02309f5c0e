"""The host check of the *_vs_pytorch scripts, the same rules as bench/host_check.h: before a
script starts, /proc/stat is sampled twice, 2 s apart, while it sleeps, so every busy jiffy is
another process's; above 0.2 busy cores it refuses to report a ratio (exit 3, naming the figure)
unless --allow-load, which marks its JSON "noisy": true. It prints a "host:" line at the start
and one at the end, and adds "host" (CPU model, cores, load averages, busy cores) and "noisy" to
the closing JSON. The parsers take /proc text as strings, so tests check them on fixed text.

    host = HostCheck("vs_pytorch", args.allow_load)   # after argparse (add_allow_load(parser))
    ... run Kiln's benchmark with host.child_flags(), and PyTorch's ...
    print(json.dumps(host.finish(result, children=[kiln_json, ...])))
"""
import math
import sys
import time

MAX_BUSY_CORES = 0.2
SAMPLE_SECONDS = 2.0
LOADED_EXIT_CODE = 3
ALLOW_LOAD_HELP = ("report even when other processes kept more than 0.2 cores busy over the 2 s before the start "
                   "(the JSON is marked \"noisy\": true); without it such a run exits 3")


def parse_proc_stat(text):
    """(busy, total) jiffies of /proc/stat's aggregate "cpu" line: busy = user + nice + system +
    irq + softirq + steal, total = busy + idle + iowait (guest time is inside user and nice).
    Fields missing after idle count 0. Raises ValueError when the line is missing or short."""
    for line in text.splitlines():
        if line.startswith("cpu "):
            v = [int(x) for x in line.split()[1:9]]
            if len(v) < 4:
                raise ValueError(f"/proc/stat: the \"cpu\" line has {len(v)} fields, want at least 4: {line!r}")
            v += [0] * (8 - len(v))
            busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
            return busy, busy + v[3] + v[4]
    raise ValueError("/proc/stat: no aggregate \"cpu\" line")


def count_cpus(text):
    """The "cpuN" lines of /proc/stat text: the CPUs the aggregate line sums (at least 1)."""
    return max(1, sum(1 for l in text.splitlines() if len(l) > 3 and l.startswith("cpu") and l[3].isdigit()))


def parse_cpu_model(text):
    """The first "model name" of /proc/cpuinfo text, its spaces collapsed; else the first
    "Processor" or "cpu model" (some arm64 and MIPS kernels); else "unknown CPU"."""
    for key in ("model name", "Processor", "cpu model"):
        for line in text.splitlines():
            name, colon, value = line.partition(":")
            if colon and " ".join(name.split()) == key and value.split():
                return " ".join(value.split())
    return "unknown CPU"


def parse_loadavg(text):
    """The 1-minute load average: the first field of /proc/loadavg text (-1 when unreadable)."""
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return -1.0


def busy_cores(before, after, cpus):
    """Cores kept busy between two (busy, total) samples: the busy share of the jiffies that
    passed times the CPUs (0 when none passed)."""
    if after[1] <= before[1]:
        return 0.0
    return max(0, after[0] - before[0]) / (after[1] - before[1]) * cpus


def judge_load(busy, allow_load, max_busy_cores=MAX_BUSY_CORES):
    """"quiet", "noisy" (loaded, but --allow-load) or "refused" (loaded). NaN (the busy cores
    unknown) is not quiet."""
    if busy <= max_busy_cores:
        return "quiet"
    return "noisy" if allow_load else "refused"


def read_text(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def add_allow_load(parser):
    """Adds --allow-load to an argparse parser."""
    parser.add_argument("--allow-load", action="store_true", help=ALLOW_LOAD_HELP)


class HostCheck:
    """One script run's host check: the constructor samples (sleeping `sample_s`), prints the start
    line, and exits LOADED_EXIT_CODE (the reason on stderr) when the machine is loaded and
    `allow_load` is false. `read` reads a /proc file (tests give fixed text)."""

    def __init__(self, program, allow_load, sample_s=SAMPLE_SECONDS, read=read_text, sleep=time.sleep):
        self.program, self.allow_load, self._read = program, allow_load, read
        self.cpu_model = parse_cpu_model(read("/proc/cpuinfo"))
        self.load_start = parse_loadavg(read("/proc/loadavg"))
        self.load_end = -1.0
        self.children_noisy = []
        try:
            first = read("/proc/stat")
            self.cores = count_cpus(first)
            before = parse_proc_stat(first)
            sleep(sample_s)  # this process only sleeps: every busy jiffy is another process's
            self.busy = busy_cores(before, parse_proc_stat(read("/proc/stat")), self.cores)
            busy_text = f"other processes kept {self.busy:.2f} cores busy over {sample_s:g} s"
        except ValueError as e:
            self.cores, self.busy = count_cpus(""), math.nan
            busy_text = f"the busy cores are unknown ({e})"
        self.verdict = judge_load(self.busy, allow_load)
        print(f"host: {self.cpu_model}, {self.cores} cores, load average {self.load_start:.2f}; {busy_text}",
              flush=True)
        if self.verdict == "noisy":
            print(f"host: more than {MAX_BUSY_CORES} busy cores: reporting anyway (--allow-load), the result is "
                  "marked noisy", flush=True)
        if self.verdict == "refused":
            print(f"{program}: {busy_text} (more than {MAX_BUSY_CORES} allowed): refusing to report a ratio from a "
                  "loaded machine; run it when the machine is quiet, or pass --allow-load to report it marked "
                  "\"noisy\"", file=sys.stderr, flush=True)
            sys.exit(LOADED_EXIT_CODE)

    def child_flags(self):
        """The flags for Kiln's benchmarks this script starts. They check the machine again before
        they measure: --allow-load goes down only when this script was given it, so a machine
        that became loaded after this script's own check makes the child refuse (and the script
        fail) instead of reporting an un-flagged ratio; under --allow-load a loaded child marks
        its JSON noisy, and finish() carries that into the script's result."""
        return ["--allow-load"] if self.allow_load else []

    @property
    def noisy(self):
        return self.verdict == "noisy" or any(self.children_noisy)

    def finish(self, result, children=()):
        """Prints the end line (the load average again) and returns `result` with "host" and
        "noisy" added; `children`: the JSON results of Kiln's benchmarks this script ran (a noisy
        one makes the result noisy)."""
        self.children_noisy += [bool(c.get("noisy")) for c in children if isinstance(c, dict)]
        self.load_end = parse_loadavg(self._read("/proc/loadavg"))
        why = ""
        if self.verdict == "noisy":
            why = "; noisy: the machine was loaded at the start"
        elif self.noisy:
            why = "; noisy: a Kiln benchmark it ran found the machine loaded"
        print(f"host: {self.cpu_model}, {self.cores} cores, load average {self.load_end:.2f} at the end "
              f"({self.load_start:.2f} at the start){why}", flush=True)
        host = {"cpu_model": self.cpu_model, "cores": self.cores, "load_average_start": self.load_start,
                "load_average_end": self.load_end, "busy_cores": None if math.isnan(self.busy) else self.busy,
                "max_busy_cores": MAX_BUSY_CORES}
        return {**result, "host": host, "noisy": self.noisy}
