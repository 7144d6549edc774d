#!/usr/bin/env bash
# shellcheck disable=SC2317  # the step functions run through `step` (bash -c), not called directly
# One-node GPU validation: every GPU path of the current code on this machine's GPUs, in
# under 8 minutes, with the machine's own python (torch + nvidia-ml-py installed). Steps, in
# order, each timed, under a hard time limit and logged to <step>.log in the output folder:
#
#   env        GPU / driver / torch inventory (env.txt)
#   plan       gpufleet plan for what is installed -> a node manifest, so that the
#              plan-dependent checks run (plan.json, manifest.json)
#   nvml       NVML recording of this node (node-nvml.json; replayable by the tests)
#   checks     node checks suite checks/ with --require-gpu (checks.{json,xml})
#   compute    gpufleet compute: matmul TFLOP/s per GPU (all GPUs at once, bf16; fp16 before
#              compute capability 8.0), judged against the profile's floor and the node's best GPU, and
#              the silent-data-corruption digests (compute.json; issue 40 items 1 and 3)
#   quick      the quick tier's node work (the checks suite, then gpufleet compute) under the
#              tier's budget, 60 s (quick-checks.json, quick-compute.json; item 4)
#   collectives all_gather, reduce_scatter, alltoall, broadcast, sendrecv on this node's GPUs
#              (gpufleet.verify.workers.collectives, one rank per GPU; collectives.json; item 2)
#   burnin     gpufleet compute --burnin BURNIN (default 2m): every GPU busy, NVML sampled,
#              throttle reasons, compute drop and Xids judged (burnin.json; item 4)
#   smoke      smoke suite smoke_tests/: DP, DDP, AMP, SyncBN, all-reduce (smoke.{json,xml})
#   train      the cluster training step, one node (gpufleet.verify.workers.train: one rank
#              per GPU, DDP + SyncBatchNorm + AMP; world size 1 on one GPU) (train.json)
#   run        make run of a user's script (tests/fixtures/run/plain_ddp.py): `make run`
#              where the .venv is set up, else playbooks/run.yml where ansible-playbook is,
#              else the supervise + torchrun command line the playbook builds (run-rank*.log)
#   profile    gpufleet profile diff against the detected profile (profile.json). Findings are
#              recorded, never a failure of this script (one H200 in a VM differs from the
#              HGX H200 profile in GPU count and NVLink); only a timeout or crash counts
#   health     gpufleet health, the fast path (health.json)
#   allreduce  local all-reduce sweep, one rank per GPU (allreduce.json): the bus bandwidth
#              at the largest size; with one GPU the world size is 1 and busbw is 0 by
#              definition (no bandwidth figure without a second GPU; the summary says so)
#
# Output folder: $OUT (the device tool sets it), else reports/gpu-validation. At the end
# summary.txt (one line per step: status, seconds, exit code, note) and summary.json.
# Status per step: pass, fail, timeout, skip (with why), recorded (profile), cpu (ran in its
# CPU form: no GPU here, so nothing was validated on a GPU).
#
# Without a GPU (no nvidia-smi GPU or torch without CUDA) the script says so, skips the
# GPU-only steps (plan, nvml, profile) and runs the others in their CPU form (gloo) so that
# the script itself is exercised; CPU_FORM=0 skips those too.
#
# Exit status: 0 every step passed on a GPU (profile findings allowed); 1 a step failed or
# timed out; 3 no GPU here (nothing validated on a GPU; 1 still wins when a CPU-form step
# failed).
#
# Time: BUDGET (default 600 s) bounds all steps together; each step's limit is the smaller of
# its own (ENV_TIMEOUT 30, PLAN_TIMEOUT 30, NVML_TIMEOUT 60, CHECKS_TIMEOUT 90,
# COMPUTE_TIMEOUT 120, the quick tier 60, COLLECTIVES_TIMEOUT 90, the burn-in BURNIN + 90,
# SMOKE_TIMEOUT 180, TRAIN_TIMEOUT 90, RUN_TIMEOUT 120, PROFILE_TIMEOUT 30, HEALTH_TIMEOUT
# 60, ALLREDUCE_TIMEOUT 60) and what is left of the budget; a step with under 15 s left is
# skipped. The issue-40 steps run first, after checks. Each limit is hard: TERM, then KILL
# 10 s later.
#
#   scripts/gpu-validate.sh                      # on a GPU node whose python3 has torch
#   OUT=/tmp/gv PY=/opt/env/bin/python scripts/gpu-validate.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
REPO=$PWD
OUT=${OUT:-reports/gpu-validation}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [ -z "${PY:-}" ]; then
  # the machine's python3 when it has torch (a GPU node), else the project's .venv (CPU torch)
  PY=python3
  if ! python3 -c 'import torch' >/dev/null 2>&1 && [ -x .venv/bin/python ]; then
    PY=$REPO/.venv/bin/python
  fi
fi
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export PY REPO OUT
BUDGET=${BUDGET:-600}
CPU_FORM=${CPU_FORM:-1}
START=$SECONDS
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
rc_all=0
STEP_RC=0

say() { printf '>> %s\n' "$*"; }

# record NAME STATUS SECONDS RC NOTE
record() {
  printf '%-10s %-9s %5ss rc=%-4s %s\n' "$1" "$2" "$3" "$4" "$5" | tee -a "$SUMMARY"
  case "$2" in fail | timeout) rc_all=1 ;; esac
}

# step NAME LIMIT KIND CMD... : run CMD with its output in NAME.log under the smaller of LIMIT
# and the budget left. KIND: gpu (pass/fail), cpu (ran in its CPU form), info (any exit
# status but a timeout is recorded, not failed). Sets STEP_RC.
step() {
  local name=$1 limit=$2 kind=$3 left t0 secs status
  shift 3
  left=$((BUDGET - (SECONDS - START)))
  if [ "$left" -lt 15 ]; then
    STEP_RC=-1
    record "$name" skip 0 - "out of time (BUDGET=${BUDGET}s spent)"
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  say "$name (limit ${limit}s): $*"
  # a function of this script runs in a bash of its own, so that timeout can end it
  if declare -F "$1" >/dev/null; then set -- bash -c "$(declare -f "$1"); $1"; fi
  t0=$SECONDS
  timeout -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1
  STEP_RC=$?
  secs=$((SECONDS - t0))
  if [ "$STEP_RC" -eq 124 ] || [ "$STEP_RC" -eq 137 ]; then
    status=timeout
  elif [ "$kind" = info ]; then
    status=recorded
  elif [ "$STEP_RC" -ne 0 ]; then
    status=fail
  elif [ "$kind" = cpu ]; then
    status=cpu
  else
    status=pass
  fi
  tail -n "${TAIL_LINES:-15}" "$OUT/$name.log" | sed "s/^/   [$name] /"
  # the torchrun output of a supervised step
  [ -s "$OUT/$name-torchrun.log" ] && tail -n "${TAIL_LINES:-15}" "$OUT/$name-torchrun.log" | sed "s/^/   [$name torchrun] /"
  record "$name" "$status" "$secs" "$STEP_RC" "${NOTE:-} (log: $name.log)"
  NOTE=
}

skip() { record "$1" skip 0 - "$2"; }

# --- env: what this machine is -------------------------------------------------------------
have_gpu=0
ngpu=0
if command -v nvidia-smi >/dev/null && timeout -k 5 20 nvidia-smi -L >"$OUT/nvidia-smi-L.txt" 2>&1 \
  && grep -q '^GPU ' "$OUT/nvidia-smi-L.txt"; then
  have_gpu=1
fi
env_py() {
  echo "# gpu-validate $(date -u +%FT%TZ) on $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "python: $PY"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,persistence_mode --format=csv
  else
    echo "nvidia-smi: not installed"
  fi
  "$PY" - <<'PY'
import platform
import torch
print("python", platform.python_version())
cuda = torch.cuda.is_available()
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", cuda,
      "nccl", ".".join(map(str, torch.cuda.nccl.version())) if cuda else None)
print("arch_list", torch.cuda.get_arch_list())
for i in range(torch.cuda.device_count()):
    print("device", i, torch.cuda.get_device_name(i), torch.cuda.get_device_capability(i))
PY
}
NOTE="GPU/driver/torch inventory in env.txt"
step env "${ENV_TIMEOUT:-30}" gpu env_py
cp "$OUT/env.log" "$OUT/env.txt"
if [ "$have_gpu" = 1 ]; then
  ngpu=$(timeout -k 5 60 "$PY" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null || echo 0)
  [ "$ngpu" -gt 0 ] 2>/dev/null || have_gpu=0
fi
if [ "$have_gpu" = 1 ]; then
  say "GPU: $ngpu CUDA device(s) visible to $PY"
  FORM=gpu
else
  say "NO GPU: nvidia-smi lists none or torch ($PY) has no CUDA device; GPU-only steps are skipped$([ "$CPU_FORM" = 1 ] && echo ', the others run in their CPU form (not a GPU validation)')"
  FORM=cpu
fi
# ranks per node: one per GPU; two gloo ranks on CPU
nproc=$([ "$have_gpu" = 1 ] && echo "$ngpu" || echo 2)
cpu_skip() { # NAME: skip a step that has a CPU form when CPU_FORM=0
  [ "$have_gpu" = 1 ] || [ "$CPU_FORM" = 1 ] && return 1
  skip "$1" "no GPU (CPU_FORM=0)"
}

# --- plan: a manifest from the planner, for the plan-dependent checks -----------------------
manifest=$OUT/manifest.json
export manifest ngpu nproc
mopt=()
make_manifest() {
  local torch_ver variant driver archs
  torch_ver=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])') || return 1
  variant=$("$PY" -c 'import torch; v = torch.version.cuda; print("cu" + v.replace(".", "") if v else "cpu")') || return 1
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 | tr -d ' ')
  archs=$("$PY" -c 'import torch; print(",".join("sm_%d%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())))') || return 1
  echo "gpufleet plan --torch $torch_ver --cuda $variant --driver $driver --gpu-arch $archs"
  "$PY" -m gpufleet plan --torch "$torch_ver" --cuda "$variant" --driver "$driver" \
    --gpu-arch "$archs" --json >"$OUT/plan.json" || return 1
  cat "$OUT/plan.json"
  "$PY" - "$OUT/plan.json" "$manifest" "$variant" "$ngpu" <<'PY'
import json, socket, sys
plan = json.load(open(sys.argv[1]))
json.dump({"schema": 1, "node": socket.gethostname(), "plan": plan,
           "env_wheel_variant": sys.argv[3], "gpus_expected": int(sys.argv[4]),
           "require_gpu": True, "allow_no_gpu": False}, open(sys.argv[2], "w"), indent=2)
PY
}
if [ "$have_gpu" = 1 ]; then
  NOTE="planner's answer for what is installed -> manifest.json"
  step plan "${PLAN_TIMEOUT:-30}" gpu make_manifest
  if [ "$STEP_RC" -eq 0 ] && [ -s "$manifest" ]; then
    mopt=(--gpufleet-manifest "$manifest")
  else
    say "the planner refused what is installed: the checks run without a manifest (plan-dependent checks skip)"
  fi
else
  skip plan "no GPU (no driver to plan for)"
fi

# --- nvml: a replayable recording ------------------------------------------------------------
if [ "$have_gpu" = 1 ]; then
  NOTE="node-nvml.json"
  step nvml "${NVML_TIMEOUT:-60}" gpu "$PY" -m gpufleet nvml record --full --output "$OUT/node-nvml.json"
else
  skip nvml "no GPU (no NVML)"
fi

# --- checks: the node checks suite ----------------------------------------------------------
if ! cpu_skip checks; then
  req=(--require-gpu)
  [ "$have_gpu" = 1 ] || req=(--no-require-gpu)
  NOTE="checks.{json,xml}"
  step checks "${CHECKS_TIMEOUT:-90}" "$FORM" "$PY" -m pytest -c checks/pytest.ini checks/ \
    -p no:cacheprovider -rA ${mopt[@]+"${mopt[@]}"} "${req[@]}" \
    --gpufleet-json="$OUT/checks.json" --junitxml="$OUT/checks.xml"
fi

# --- compute: matmul TFLOP/s and SDC digests per device (issue 40 items 1 and 3) ------------
if ! cpu_skip compute; then
  NOTE="compute.json (records compute_matmul per device, compute_floor, sdc_repeat)"
  step compute "${COMPUTE_TIMEOUT:-120}" "$FORM" "$PY" -m gpufleet compute --node "$(hostname)" \
    --output "$OUT/compute.json"
  if [ -s "$OUT/compute.json" ]; then
    "$PY" - "$OUT/compute.json" <<'PY' | tee -a "$SUMMARY"
import json, sys
d = json.load(open(sys.argv[1]))
figs = ", ".join(f"{f['device']} {f['dtype']} {f['tflops']:g}" for f in d["meta"]["figures"])
print(f"compute    figure: TFLOP/s {figs}; profile {d['meta'].get('profile')}")
PY
  fi
fi

# --- quick: the quick tier's node work under its budget (issue 40 item 4) -------------------
# what make verify TIER=quick runs on a node: the checks suite, then gpufleet compute, within
# the tier's 60 s (gpufleet.verify.tiers.QUICK_BUDGET_S); a timeout here is the tier over budget
quick_tier() {
  local req=(--require-gpu)
  [ "$have_gpu" = 1 ] || req=(--no-require-gpu)
  "$PY" -m pytest -c checks/pytest.ini checks/ -p no:cacheprovider -q "${req[@]}" \
    --gpufleet-json="$OUT/quick-checks.json" && \
  "$PY" -m gpufleet compute --node "$(hostname)" --output "$OUT/quick-compute.json"
}
if ! cpu_skip quick; then
  export have_gpu
  NOTE="the quick tier's node work in its 60 s budget (quick-checks.json, quick-compute.json)"
  step quick 60 "$FORM" quick_tier
fi

# --- collectives: every collective beside all-reduce on this node (issue 40 item 2) ---------
if ! cpu_skip collectives; then
  limit=${COLLECTIVES_TIMEOUT:-90}
  NOTE="collectives.json, $nproc ranks (with one GPU sendrecv skips: one rank)"
  step collectives "$((limit + 15))" "$FORM" "$PY" -m gpufleet.verify.workers.supervise --timeout "$limit" \
    --log "$OUT/collectives-torchrun.log" -- \
    "$PY" -m torch.distributed.run --nnodes 1 --nproc-per-node "$nproc" --rdzv-backend static \
    --master-addr 127.0.0.1 --master-port "${COLLECTIVES_PORT:-29514}" --max-restarts 0 \
    -m gpufleet.verify.workers.collectives --out-dir "$OUT/collectives-ranks" \
    --result-json "$OUT/collectives.json"
fi

# --- burnin: every device busy for BURNIN, NVML sampled (issue 40 item 4) --------------------
if ! cpu_skip burnin; then
  burn=$("$PY" -m gpufleet.units duration BURNIN "${BURNIN:-2m}") || burn=120
  NOTE="burnin.json, $burn s held (records burnin_throttle, burnin_compute_drop, burnin_xid, burnin_samples)"
  step burnin "$((burn + 90))" "$FORM" "$PY" -m gpufleet compute --node "$(hostname)" \
    --burnin "$burn" --sdc-repeats 0 --output "$OUT/burnin.json"
fi

# --- smoke: the smoke suite -----------------------------------------------------------------
if ! cpu_skip smoke; then
  NOTE="smoke.{json,xml}"
  step smoke "${SMOKE_TIMEOUT:-180}" "$FORM" "$PY" -m pytest smoke_tests/ -p no:cacheprovider -rA \
    --gpufleet-json="$OUT/smoke.json" --junitxml="$OUT/smoke.xml"
fi

# --- train: the cluster training step on this node ------------------------------------------
# The worker verify launches, one rank per GPU (NCCL, SyncBatchNorm, bf16 or fp16+GradScaler).
# With one GPU, world size 1: SyncBatchNorm and DDP run in their trivial form (no peer); the
# record says so through meta.world_size. supervise holds the job in its own process group.
if ! cpu_skip train; then
  limit=${TRAIN_TIMEOUT:-90}
  NOTE="train.json, world size $nproc"
  step train "$((limit + 15))" "$FORM" "$PY" -m gpufleet.verify.workers.supervise --timeout "$limit" \
    --log "$OUT/train-torchrun.log" -- \
    "$PY" -m torch.distributed.run --nnodes 1 --nproc-per-node "$nproc" --rdzv-backend static \
    --master-addr 127.0.0.1 --master-port "${TRAIN_PORT:-29511}" --max-restarts 0 \
    -m gpufleet.verify.workers.train --out-dir "$OUT/train-ranks" --result-json "$OUT/train.json" \
    --kind train-1node
fi

# --- run: make run of a user's script -------------------------------------------------------
run_script=$REPO/tests/fixtures/run/plain_ddp.py
run_id=gpu-validate-$(date -u +%Y%m%dT%H%M%SZ)
run_limit=${RUN_TIMEOUT:-120}
export run_script run_id run_limit
run_via_make() {
  make --no-print-directory run SCRIPT="$run_script" RUN_ID="$run_id" INVENTORY=inventory \
    VERIFY_ARGS="-e verify_python=$PY -e verify_script_timeout=$run_limit"
}
run_via_playbook() {
  ansible-playbook playbooks/run.yml -i inventory -e "verify_python=$PY" \
    -e "verify_script=$run_script" -e "verify_run_id=$run_id" \
    -e "verify_script_timeout=$run_limit"
}
run_direct() {
  local envf=()
  [ -r /etc/gpufleet/nccl.env ] && envf=(--env-file /etc/gpufleet/nccl.env)
  "$PY" -m gpufleet.verify.workers.supervise --timeout "$run_limit" --log "$OUT/run-torchrun.log" \
    ${envf[@]+"${envf[@]}"} -- \
    "$PY" -m torch.distributed.run --nnodes 1 --nproc-per-node "$nproc" --rdzv-backend static \
    --master-addr 127.0.0.1 --master-port "${RUN_PORT:-29512}" --max-restarts 0 \
    --log-dir "$OUT/run-ranks" --redirects 3 --tee 3 "$run_script"
}
if ! cpu_skip run; then
  # `make run` needs the .venv already set up (make setup installs from the network)
  if [ -x .venv/bin/ansible-playbook ] && make -q setup >/dev/null 2>&1; then
    how=run_via_make
    NOTE="make run SCRIPT=tests/fixtures/run/plain_ddp.py RUN_ID=$run_id; logs in reports/$run_id/"
  elif command -v ansible-playbook >/dev/null; then
    how=run_via_playbook
    NOTE="playbooks/run.yml (no set-up .venv for make run); logs in reports/$run_id/"
  else
    how=run_direct
    NOTE="supervise + torchrun as the playbook builds it (no ansible here); run-ranks/"
  fi
  step run "$((run_limit + 60))" "$FORM" "$how"
  cp reports/"$run_id"/*/run-rank*.log reports/"$run_id"/run-rank*.log "$OUT/" 2>/dev/null || true
fi

# --- profile: the node against its detected profile (findings recorded, not failed) ---------
if [ "$have_gpu" = 1 ]; then
  NOTE="findings in profile.json (exit 1 = a finding fails, 2 = no profile matches: recorded, not a failure of this script)"
  step profile "${PROFILE_TIMEOUT:-30}" info "$PY" -m gpufleet profile diff --json "$OUT/profile.json"
else
  skip profile "no GPU (the profile is detected from NVML)"
fi

# --- health: gpufleet health, the fast path -------------------------------------------------
if ! cpu_skip health; then
  limit=${HEALTH_TIMEOUT:-60}
  hopt=(--no-require-gpu)
  [ "$have_gpu" = 1 ] && hopt=(--require-gpu --expected-gpus "$ngpu")
  [ -s "$manifest" ] && hopt+=(--manifest "$manifest")
  NOTE="health.json (exit 3 = a check incomplete)"
  step health "$((limit + 10))" "$FORM" "$PY" -m gpufleet health --timeout "$((limit - 5))" \
    "${hopt[@]}" --output "$OUT/health.json"
fi

# --- allreduce: a local bandwidth figure ----------------------------------------------------
if ! cpu_skip allreduce; then
  limit=${ALLREDUCE_TIMEOUT:-60}
  # gloo on a CPU moves 1 GiB far too slowly for the limit: the CPU form sweeps small sizes
  sizes=${ALLREDUCE_SIZES:-$([ "$have_gpu" = 1 ] && echo 1M,16M,128M,1G || echo 1M,16M)}
  NOTE="allreduce.json, $nproc ranks, sizes $sizes"
  step allreduce "$((limit + 15))" "$FORM" "$PY" -m gpufleet.verify.workers.supervise --timeout "$limit" \
    --log "$OUT/allreduce-torchrun.log" -- \
    "$PY" -m torch.distributed.run --nnodes 1 --nproc-per-node "$nproc" --rdzv-backend static \
    --master-addr 127.0.0.1 --master-port "${ALLREDUCE_PORT:-29513}" --max-restarts 0 \
    -m gpufleet.verify.workers.allreduce --out-dir "$OUT/allreduce-ranks" \
    --sizes "$sizes" --result-json "$OUT/allreduce.json" --kind allreduce
  if [ -s "$OUT/allreduce.json" ]; then
    "$PY" - "$OUT/allreduce.json" <<'PY' | tee -a "$SUMMARY"
import json, sys
rows = json.load(open(sys.argv[1])).get("bandwidth") or []
if not rows:
    print("allreduce  figure: no rows")
else:
    r = max(rows, key=lambda r: r["size_bytes"])
    size = r["size_bytes"] / 2**20
    if r["world_size"] < 2:
        print(f"allreduce  figure: none, world size 1 (busbw 0 by definition; algbw "
              f"{r['algbw']:.1f} GB/s at {size:.0f} MiB is a copy-free no-op, not a bandwidth)")
    else:
        print(f"allreduce  figure: busbw {r['busbw']:.1f} GB/s, algbw {r['algbw']:.1f} GB/s at "
              f"{size:.0f} MiB, {r['world_size']} ranks, {r['backend']}")
PY
  fi
fi

# --- summary --------------------------------------------------------------------------------
total=$((SECONDS - START))
[ "$have_gpu" = 1 ] || [ "$rc_all" -ne 0 ] || rc_all=3
case $rc_all in
  0) verdict="PASS: every GPU step passed on $ngpu GPU(s)" ;;
  1) verdict="FAIL: a step failed or timed out (see above)" ;;
  *) verdict="NO GPU: nothing validated on a GPU; skipped: plan, nvml, profile$([ "$CPU_FORM" = 1 ] && echo '; the rest ran in their CPU form' || echo ', and every other step but env (CPU_FORM=0)')" ;;
esac
echo "total ${total}s (budget ${BUDGET}s); exit $rc_all; $verdict" | tee -a "$SUMMARY"
"$PY" - "$SUMMARY" "$OUT/summary.json" "$rc_all" "$have_gpu" "$ngpu" "$total" <<'PY' || true
import json, re, sys
steps, figure = [], None
for line in open(sys.argv[1]):
    m = re.match(r"(\S+)\s+(pass|fail|timeout|skip|recorded|cpu)\s+(\d+)s rc=(\S+)\s*(.*)", line)
    if m:
        steps.append({"step": m[1], "status": m[2], "seconds": int(m[3]),
                      "rc": None if m[4] == "-" else int(m[4]), "note": m[5]})
    elif line.startswith("allreduce  figure:"):
        figure = line.split(":", 1)[1].strip()
json.dump({"exit": int(sys.argv[3]), "gpu": sys.argv[4] == "1", "gpus": int(sys.argv[5]),
           "seconds": int(sys.argv[6]), "steps": steps, "allreduce_figure": figure},
          open(sys.argv[2], "w"), indent=2)
PY
say "summary: $SUMMARY, $OUT/summary.json"
exit "$rc_all"
