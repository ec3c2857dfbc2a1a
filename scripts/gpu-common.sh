# Shell functions the GPU scripts share (sourced by gpu-check.sh and gpu-finetune.sh).

# The folder holding the CUDA libraries' `nvidia/` packages: $RLX_CUDA_LIBS, else the
# site-packages of the first python3 that has them.
cuda_libs() {
  if [ -n "${RLX_CUDA_LIBS:-}" ]; then
    echo "$RLX_CUDA_LIBS"
    return
  fi
  for py in python3 /opt/torch/.venv/bin/python3; do
    local dir
    dir=$("$py" -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null) || continue
    [ -d "$dir/nvidia" ] && { echo "$dir"; return; }
  done
  echo "$(basename "$0"): no CUDA libraries found: set RLX_CUDA_LIBS to a folder holding nvidia/cublas/lib, ..." >&2
  return 1
}

# Puts the CUDA libraries of $1 (an `nvidia` folder) at $2, where libmlx's RPATH looks: a
# link, or, when $3 holds headers the folder lacks (CUDA's crt/), a tree of links to $1 with
# those headers added under cu13/include.
link_cuda_libs() {
  local from=$1 to=$2 extra=$3
  rm -rf "$to"
  if [ ! -d "$extra" ] || [ -z "$(ls -A "$extra")" ] || [ -d "$from/cu13/include/crt" ]; then
    ln -sfn "$from" "$to"
    return
  fi
  mkdir -p "$to/cu13/include"
  local e
  for e in "$from"/*; do [ "$(basename "$e")" = cu13 ] || ln -s "$e" "$to/"; done
  for e in "$from"/cu13/*; do [ "$(basename "$e")" = include ] || ln -s "$e" "$to/cu13/"; done
  for e in "$from"/cu13/include/* "$extra"/*; do ln -sfn "$e" "$to/cu13/include/"; done
}
