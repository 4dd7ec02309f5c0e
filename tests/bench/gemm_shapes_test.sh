#!/usr/bin/env bash
# bench/gemm_shapes: the table it lists (which bench/gemm_shapes.py hands to torch.matmul) has the
# three products of every Linear with consistent dims, a short run reports a positive GFLOP/s for
# every listed product, and a bad flag is refused with exit 2 naming it.
# Argument: the gemm_shapes binary.
set -u
bin="$1"
failures=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; failures=$((failures + 1)); fi; }

list=$("$bin" --list)
check "--list prints 38 products" "[ \"\$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])))' \"\$list\")\" = 38 ]"
check "each Linear's dx and dw products are its fwd product's transposes" "python3 - \"\$list\" <<'PY'
import json, sys
rows = {r['name']: r for r in json.loads(sys.argv[1])}
for name, f in rows.items():
    if not name.endswith('.fwd'):
        continue
    base = name[:-4]
    dx, dw = rows[base + '.dx'], rows[base + '.dw']
    assert (f['a_t'], f['b_t']) == (False, True), name
    assert (dx['m'], dx['k'], dx['n']) == (f['m'], f['n'], f['k']), base
    assert (dw['m'], dw['k'], dw['n'], dw['a_t']) == (f['n'], f['m'], f['k'], True), base
PY"
out=$("$bin" --threads 1 --budget-s 0.01 --allow-load 2>/dev/null | tail -1)
check "a short run reports every listed product with GFLOP/s > 0" "python3 - \"\$list\" \"\$out\" <<'PY'
import json, sys
names = [r['name'] for r in json.loads(sys.argv[1])]
g = json.loads(sys.argv[2])['gflops']
assert sorted(g) == sorted(names), set(names) ^ set(g)
assert all(v > 0 for v in g.values()), g
PY"
err=$("$bin" --threads 0 2>&1 >/dev/null); code=$?
check "--threads 0 is refused with exit 2 naming the flag" "[ $code -eq 2 ] && [[ \"\$err\" == *--threads* ]]"
echo "$failures failed"
[ "$failures" -eq 0 ]
