#!/usr/bin/env bash
# The CUDA paths end to end, on a machine with a GPU (CI has none, so these run by hand):
#   1. tests/test_cuda.py: device choice, data on the GPU, fp32/tf32/bf16 training, GPU predict;
#   2. the demo search on the GPU (1 master + 3 workers sharing it), once per precision, timed, each
#      training in its own process (train.isolation = "process", the default); then fp32 again with the
#      trainings in the worker ranks (isolation "none") and with train.max_host_memory_gb = 4 (CUDA's
#      host memory must fit under the cap);
#   3. `evens predict` of the last run's ensemble on the GPU, checked against the CPU's answer.
# Usage: scripts/gpu_check.sh [PYTHON] (default: .venv/bin/python if present, else python3).
# mpiexec must be on PATH. Logs and runs go to ${OUT:-gpu-check}/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
DEST=${OUT:-gpu-check}
mkdir -p "$DEST" data
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print('GPU:', torch.cuda.get_device_name(0), 'torch', torch.__version__)"

echo "== 1. tests/test_cuda.py"
"$PY" -m pytest -q -p no:cacheprovider tests/test_cuda.py

echo "== 2. the demo search on the GPU, by precision"
[ -f data/digits.h5 ] || "$PY" -m evolve make-digits data/digits.h5
for name in fp32 tf32 bf16 fp32-isolation-none fp32-memory-cap; do
    precision=${name%%-*}
    extra=()
    [ "$name" = fp32-isolation-none ] && extra=(--set train.isolation=none)
    [ "$name" = fp32-memory-cap ] && extra=(--set train.max_host_memory_gb=4)
    start=$(date +%s%N)
    mpiexec -n 4 "$PY" -m evolve run examples/digits.toml --out "$DEST/run-$name" \
        --set train.device=cuda --set train.precision="$precision" "${extra[@]}" > "$DEST/run-$name.log" 2>&1
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    grep -m 2 -i "cuda\|gpu" "$DEST/run-$name.log" | sed 's/^/  /' || true
    "$PY" - "$DEST/run-$name/summary.json" "$name" "$ms" <<'EOF' || tail -5 "$DEST/run-$name.log"
import json, sys
s, precision, ms = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3])
e = s["ensemble"]
assert s["status_counts"].get("crashed", 0) == 0 and s["status_counts"].get("error", 0) == 0, s["status_counts"]
print(f"{precision}: {ms / 1000:.1f} s launch to exit, search {s['wall_seconds']:.1f} s, {s['evaluations']} evaluations, "
      f"statuses {s['status_counts']}, utilization {s['worker_utilization']:.2f}, best val {s['best']['val_accuracy']:.4f}, "
      f"ensemble test {e['test_accuracy']:.4f}")
EOF
done

echo "== 3. evens predict on the GPU and on the CPU"
for device in cuda cpu; do
    "$PY" -m evolve predict "$DEST/run-fp32" data/digits.h5 --split test --device $device --out "$DEST/pred-$device.h5"
done
"$PY" - "$DEST" <<'EOF'
import sys, h5py, numpy as np
d = sys.argv[1]
with h5py.File(f"{d}/pred-cuda.h5") as g, h5py.File(f"{d}/pred-cpu.h5") as c:
    names = sorted(g)
    assert names == sorted(c), (names, sorted(c))
    for name in names:
        if isinstance(g[name], h5py.Dataset) and g[name].dtype.kind in "fiu":
            a, b = g[name][()], c[name][()]
            diff = float(np.abs(a.astype(float) - b.astype(float)).max()) if a.size else 0.0
            print(f"  {name}: shape {a.shape}, max |gpu - cpu| = {diff:.2e}")
    assert np.array_equal(g["label"][()], c["label"][()]), "labels differ between GPU and CPU"
print("predict: GPU labels equal the CPU's")
EOF
