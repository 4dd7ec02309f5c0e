#!/usr/bin/env bash
# sharded_vs_pytorch.py --rounds 3 on fake programs (nothing is measured): Kiln (through the
# launcher) and PyTorch run alternately per mode; Kiln's step is the median of a run's steps
# without the first; each row's speed-up is the median of the rounds' PyTorch / Kiln ratios (not
# the ratio of the medians) with their range; a mode PyTorch fails keeps its error and no
# speed-up; Kiln's FSDP and TP are also given over Kiln's DDP; the flags reach both programs.
# Arguments: bench/sharded_vs_pytorch.py.
set -u
script="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export FAKE_DIR="$dir"

# Kiln: ddp 10, 20, 40 ms over the rounds (a slow first step each run), fsdp 20, tp 5.
cat >"$dir/launch" <<'EOF'
#!/usr/bin/env bash
mode=ddp
case " $* " in *" --fsdp "*) mode=fsdp ;; *" --tp 2 "*) mode=tp ;; esac
n=$(($(cat "$FAKE_DIR/kiln_$mode" 2>/dev/null || echo 0) + 1))
echo "$n" >"$FAKE_DIR/kiln_$mode"
echo "kiln $mode $*" >>"$FAKE_DIR/order"
ddp=(0 10 20 40)
case $mode in ddp) ms=${ddp[$n]} ;; fsdp) ms=20 ;; tp) ms=5 ;; esac
echo "[rank 0] step 1 | loss 5.5"
echo "[rank 0] {\"model\": \"d6\", \"step_ms\": [999, $ms, $ms, $ms]}"
EOF
# PyTorch: ddp 12, 40, 60 ms (ratios 1.2, 2.0, 1.5: median 1.5, not 40 / 20 = 2.0); fsdp fails; tp 10.
cat >"$dir/python" <<'EOF'
#!/usr/bin/env bash
if [ "$1" = -c ]; then echo "0.0-fake"; exit 0; fi
mode=$(echo "$*" | sed -E 's/.*--mode ([a-z]+).*/\1/')
n=$(($(cat "$FAKE_DIR/torch_$mode" 2>/dev/null || echo 0) + 1))
echo "$n" >"$FAKE_DIR/torch_$mode"
echo "torch $mode $*" >>"$FAKE_DIR/order"
ddp=(0 12 40 60)
case $mode in
  ddp) echo "{\"mode\": \"ddp\", \"step_ms\": ${ddp[$n]}}" ;;
  fsdp) echo "{\"mode\": \"fsdp\", \"error\": \"RuntimeError: no gloo\"}" ;;
  tp) echo "{\"mode\": \"tp\", \"step_ms\": 10}" ;;
esac
EOF
chmod +x "$dir/launch" "$dir/python"

out=$(KILN_TORCH_PYTHON="$dir/python" python3 "$script" --kiln-gpt gpt --launch "$dir/launch" --pytorch-script fake.py \
  --model d6 --batch-size 3 --seq-len 32 --steps 3 --rounds 3 --allow-load 2>"$dir/stderr")
code=$?
echo "$out"
if [ "$code" -ne 0 ]; then
  echo "FAIL: exit $code"
  cat "$dir/stderr"
  exit 1
fi
printf '%s\n' "$out" | tail -1 >"$dir/result.json"
python3 - "$dir/result.json" "$dir/order" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
rows = {x["mode"]: x for x in r["results"]}
order = open(sys.argv[2]).read().splitlines()
fails = []
def check(cond, what):
    if not cond:
        fails.append(what)
check([l.split()[0] + " " + l.split()[1] for l in order] ==
      ["kiln ddp", "torch ddp", "kiln fsdp", "torch fsdp", "kiln tp", "torch tp"] * 3, f"order {order}")
check(all("--batch-size 3" in l and "--seq-len 32" in l for l in order), "the batch and sequence reach both")
check(all("--max-steps 4" in l for l in order if l.startswith("kiln")), "Kiln runs --steps + 1 steps")
check(any("--tp 2" in l for l in order if l.startswith("kiln tp")), "Kiln's TP runs --tp 2")
ddp = rows["ddp"]
check(ddp["kiln_step_ms"] == 20 and ddp["kiln_rounds"] == [10, 20, 40], f"Kiln ddp {ddp}")
check(ddp["pytorch_step_ms"] == 40 and abs(ddp["speedup"] - 1.5) < 1e-9, f"ddp speed-up {ddp}")
check(abs(ddp["speedup_min"] - 1.2) < 1e-9 and abs(ddp["speedup_max"] - 2.0) < 1e-9, f"ddp range {ddp}")
fsdp = rows["fsdp"]
check(fsdp["speedup"] is None and fsdp["pytorch_error"] == "RuntimeError: no gloo", f"fsdp {fsdp}")
check(abs(fsdp["kiln_vs_kiln_ddp"] - 1.0) < 1e-9, f"fsdp over ddp: median of 2, 1, 0.5 {fsdp}")
tp = rows["tp"]
check(abs(tp["speedup"] - 2.0) < 1e-9 and abs(tp["kiln_vs_kiln_ddp"] - 0.25) < 1e-9, f"tp {tp}")
check(r["noisy"] in (True, False) and "host" in r, "host")
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
EOF
[ $? -eq 0 ] || exit 1
echo "$out" | grep -q "(PyTorch: RuntimeError: no gloo)" || { echo "FAIL: the table does not show PyTorch's error"; exit 1; }
err=$(python3 "$script" --kiln-gpt g --launch l --pytorch-script p --modes ddp,pp 2>&1)
[ $? -eq 2 ] && [[ "$err" == *"--modes ddp,pp"* ]] || { echo "FAIL: bad mode: $err"; exit 1; }
echo "all ok"
