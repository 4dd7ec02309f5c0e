#!/usr/bin/env bash
# The main job's command line: bad flags (garbage numbers, out-of-range values, unknown choices)
# and a missing data directory give a message naming the flag and the value and a non-zero exit,
# never a stack trace.
set -u
bin="$1"
failures=0

expect() {  # expect <exit code> <text in stderr> -- args...
  local want_code="$1" want_text="$2"
  shift 3
  local err code
  err=$("$bin" "$@" 2>&1 >/dev/null)
  code=$?
  if [ "$code" -ne "$want_code" ] || [[ "$err" != *"$want_text"* ]]; then
    echo "FAIL: mnist $* -> exit $code, stderr: $err (wanted exit $want_code and '$want_text')"
    failures=$((failures + 1))
  elif [[ "$err" == *"terminate called"* || "$err" == *"Aborted"* ]]; then
    echo "FAIL: mnist $* crashed: $err"
    failures=$((failures + 1))
  else
    echo "ok: mnist $*"
  fi
}

expect 2 "not expected: 1 --bogus" -- --bogus 1
expect 2 "--model: must be one of mlp|cnn|resnet18, got 'resnet'" -- --model resnet
expect 2 "--epochs: expects an integer, got 'three'" -- --epochs three
expect 2 "--epochs: must be in [1, 1000], got 0" -- --epochs 0
expect 2 "--lr: expects a number, got 'fast'" -- --lr fast
expect 2 "--save-every needs --save" -- --save-every 10
expect 2 "--auto-resume needs --save" -- --auto-resume
expect 2 "--dropout applies to --model mlp only" -- --model cnn --dropout 0.1
expect 2 "--width applies to --model resnet18 only" -- --model cnn --width 32
expect 2 "--width: must be in [1, 4096], got 0" -- --model resnet18 --width 0
expect 2 "--timeout: must be in" -- --timeout 0
expect 2 "--save-every: must be in" -- --save-every -1
expect 2 "--lr: expects a number, got 'nan'" -- --lr nan
expect 2 "--batch-size: 1 required" -- --batch-size
expect 2 "--batch-size: expects an integer, got '12abc'" -- --batch-size 12abc
expect 2 "--seed: expects an integer, got '0x10'" -- --seed 0x10
expect 2 "--workers: must be in [0, 64], got 65" -- --workers 65
expect 2 "--epochs: expects an integer in [1, 1000], got '99999999999999999999'" -- --epochs 99999999999999999999
expect 2 "--schedule: must be one of cosine|constant, got 'linear'" -- --schedule linear
expect 2 "--device: Device: unknown device 'tpu'" -- --device tpu
expect 2 "Run with --help" -- --optimizer rmsprop
expect 1 "data directory '/nonexistent/dir' does not exist" -- --data-dir /nonexistent/dir
expect 1 "does not exist" -- --data-dir /nonexistent/dir --resume /nonexistent/ckpt
expect 2 "--amp: must be one of none|f16|bf16, got 'fp8'" -- --amp fp8
expect 2 "--amp-mode: must be one of o1|o2, got 'o3'" -- --amp bf16 --amp-mode o3
expect 2 "--amp-mode o2 needs --amp f16 or --amp bf16" -- --amp-mode o2
expect 2 "--pipeline-stages 7: the mlp has only 6 layers" -- --pipeline-stages 7
expect 2 "--pipeline-stages: must be in [1, 64], got 0" -- --pipeline-stages 0
expect 2 "--model resnet18 is not one" -- --model resnet18 --pipeline-stages 2
expect 2 "--batch-size 100 does not split into --micro-batches 8" -- --pipeline-stages 2 --micro-batches 8 --batch-size 100
expect 2 "--micro-batches needs --pipeline-stages 2 or more" -- --micro-batches 4
expect 2 "--pipeline-schedule: must be one of gpipe|1f1b|interleaved, got 'zb'" -- --pipeline-stages 2 --pipeline-schedule zb
expect 2 "--pipeline-balance needs --pipeline-stages 2 or more" -- --pipeline-balance time
expect 2 "--virtual-stages needs --pipeline-stages 2 or more" -- --virtual-stages 2
expect 2 "--pipeline-balance: must be one of params|time, got 'flops'" -- --pipeline-stages 2 --pipeline-balance flops
expect 2 "--cuda-graph needs a CUDA device (--device cuda); this run is on cpu" -- --cuda-graph --device cpu

# --help lists every flag once, with its range or choices, and exits 0.
help=$("$bin" --help 2>&1)
code=$?
for want in "--epochs" "--matmul-precision" "--ddp" "--pipeline-stages" "gpipe|1f1b" "mlp|cnn|resnet18" "--width" "in [1, 1000]"; do
  if [ "$code" -ne 0 ] || [[ "$help" != *"$want"* ]]; then
    echo "FAIL: mnist --help -> exit $code, no '$want' in: $help"
    failures=$((failures + 1))
  fi
done
[ "$failures" -gt 0 ] || echo "ok: mnist --help"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
