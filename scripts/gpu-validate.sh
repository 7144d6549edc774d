#!/usr/bin/env bash
# Single-node GPU validation: node checks (checks/), smoke tests (smoke_tests/), the cluster
# training step (gpufleet.verify.workers.train, one rank per GPU: DDP, SyncBatchNorm, AMP) and the
# make-run launch of a plain DDP script, on the GPUs of this machine, with the machine's own
# python3 (torch + nvidia-ml-py installed). Writes env.txt, node-nvml.json,
# checks.{json,xml,log}, smoke.{json,xml,log}, train.{json,log}, run.log, run-rank<N>.log under
# $OUT (default reports/gpu-validation). Exit status: non-zero when any step failed.
#
#   scripts/gpu-validate.sh            # on any GPU node with torch in python3
#   OUT=/tmp/gv scripts/gpu-validate.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-reports/gpu-validation}
PY=${PY:-python3}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

{
  echo "# gpu-validate $(date -u +%FT%TZ) on $(hostname)"
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,persistence_mode --format=csv || true
  "$PY" - <<'PY'
import platform, torch
print("python", platform.python_version())
print("torch", torch.__version__, "cuda", torch.version.cuda,
      "nccl", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None)
print("arch_list", torch.cuda.get_arch_list())
for i in range(torch.cuda.device_count()):
    print("device", i, torch.cuda.get_device_name(i), torch.cuda.get_device_capability(i))
PY
} >"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# A manifest from the planner for what is installed here, so that the plan-dependent checks
# (driver floor, torch CUDA, NCCL) run instead of skipping.
torch_ver=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')
variant=$("$PY" -c 'import torch; v=torch.version.cuda; print("cu"+v.replace(".","") if v else "cpu")')
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 | tr -d ' ')
archs=$("$PY" -c 'import torch; print(",".join("sm_%d%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())))')
ngpu=$("$PY" -c 'import torch; print(torch.cuda.device_count())')
manifest=$(mktemp --suffix=.json)
planfile=$(mktemp --suffix=.json)
if "$PY" -m gpufleet plan --torch "$torch_ver" --cuda "$variant" --driver "$driver" \
    --gpu-arch "$archs" --json >"$planfile" 2>>"$OUT/env.txt"; then
  cat "$planfile" >>"$OUT/env.txt"
  "$PY" - "$planfile" "$manifest" "$variant" "$ngpu" <<'PY'
import json, socket, sys
plan = json.load(open(sys.argv[1]))
json.dump({"schema": 1, "node": socket.gethostname(), "plan": plan,
           "env_wheel_variant": sys.argv[3], "gpus_expected": int(sys.argv[4]),
           "require_gpu": True, "allow_no_gpu": False}, open(sys.argv[2], "w"), indent=2)
PY
  mopt=(--gpufleet-manifest "$manifest")
else
  echo "planner refused torch $torch_ver/$variant with driver $driver; checks run without a plan" | tee -a "$OUT/env.txt"
  mopt=()
fi

# A replayable NVML recording of this node (tests/fixtures/nvml can take it as a fixture).
timeout -k 5 60 "$PY" -m gpufleet nvml record --full --output "$OUT/node-nvml.json" >>"$OUT/env.txt" 2>&1 || true

rc=0
timeout -k 10 "${CHECKS_TIMEOUT:-240}" "$PY" -m pytest -c checks/pytest.ini checks/ -p no:cacheprovider -rA "${mopt[@]}" --require-gpu \
  --gpufleet-json="$OUT/checks.json" --junitxml="$OUT/checks.xml" >"$OUT/checks.log" 2>&1 || rc=1
tail -40 "$OUT/checks.log"
timeout -k 10 "${SMOKE_TIMEOUT:-420}" "$PY" -m pytest smoke_tests/ -p no:cacheprovider -rA \
  --gpufleet-json="$OUT/smoke.json" --junitxml="$OUT/smoke.xml" >"$OUT/smoke.log" 2>&1 || rc=1
tail -60 "$OUT/smoke.log"

# Cluster training step, one node: the worker verify launches, one rank per GPU (NCCL,
# SyncBatchNorm, bf16 or fp16+GradScaler). With one GPU, world size 1: SyncBatchNorm and DDP
# run in their trivial form (no peer); the record says so through meta.world_size.
"$PY" -m gpufleet.verify.workers.supervise --timeout "${TRAIN_TIMEOUT:-180}" --log "$OUT/train.log" -- \
  "$PY" -m torch.distributed.run --nnodes 1 --nproc-per-node "$ngpu" --rdzv-backend static \
  --master-addr 127.0.0.1 --master-port 29511 --max-restarts 0 -m gpufleet.verify.workers.train \
  --out-dir "$OUT/train-ranks" --result-json "$OUT/train.json" --kind train || rc=1
tail -20 "$OUT/train.log"

# make run's launch of a script that imports nothing from gpufleet: through the playbook when
# ansible-playbook is here (local inventory, this python), else the same supervise + torchrun
# command line the playbook builds (per-rank logs via --log-dir / --redirects / --tee).
if command -v ansible-playbook >/dev/null; then
  ansible-playbook playbooks/run.yml -i inventory -e verify_python="$(command -v "$PY")" \
    -e verify_script="$PWD/tests/fixtures/run/plain_ddp.py" -e verify_run_id=gpu-validate-run \
    -e verify_script_timeout="${RUN_TIMEOUT:-180}" >"$OUT/run.log" 2>&1 || rc=1
  cp reports/gpu-validate-run/*/run-rank*.log "$OUT/" 2>/dev/null || true
else
  "$PY" -m gpufleet.verify.workers.supervise --timeout "${RUN_TIMEOUT:-180}" --log "$OUT/run.log" \
    --env-file /etc/gpufleet/nccl.env -- \
    "$PY" -m torch.distributed.run --nnodes 1 --nproc-per-node "$ngpu" --rdzv-backend static \
    --master-addr 127.0.0.1 --master-port 29512 --max-restarts 0 --log-dir "$OUT/run-ranks" \
    --redirects 3 --tee 3 tests/fixtures/run/plain_ddp.py || rc=1
fi
tail -20 "$OUT/run.log"
rm -f "$planfile" "$manifest"
exit $rc
