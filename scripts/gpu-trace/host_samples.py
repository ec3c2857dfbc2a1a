#!/usr/bin/env python3
"""Profiles from a host_samples.cpp file: per thread group, the functions where samples
landed (self), the functions on the stack (inclusive, once per sample), and modules.

    host_samples.py FILE [--top N] [--all-threads] [--only S] [--exclude S] [--callers S]

`--only S` keeps the samples with a function matching S on the stack, `--exclude S` drops
them (both repeatable). `--callers S` also lists, for the samples with a function matching S on the stack, the
functions S's frame was called from, and the functions it called (inclusive)."""
import argparse
import bisect
import collections
import os
import subprocess


def load_segments(path):
    """PT_LOAD segments (offset, vaddr, filesz) of an ELF file."""
    out = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True).stdout
    segments = []
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == "LOAD":
            segments.append((int(parts[1], 16), int(parts[2], 16), int(parts[4], 16)))
    return segments


def load_symbols(path):
    """Sorted (address, name) of a file's defined functions, static and dynamic."""
    names = {}
    for extra in ([], ["-D"]):
        out = subprocess.run(["nm", "-C", "--defined-only", *extra, path],
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[1] in "TtWw":
                try:
                    names.setdefault(int(parts[0], 16), parts[2])
                except ValueError:
                    pass
    table = sorted(names.items())
    return [a for a, _ in table], [n for _, n in table]


class Module:
    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)
        ok = os.path.isfile(path)
        self.segments = load_segments(path) if ok else []
        self.addresses, self.names = load_symbols(path) if ok else ([], [])

    def symbol(self, file_offset):
        for offset, vaddr, size in self.segments:
            if offset <= file_offset < offset + size:
                v = file_offset - offset + vaddr
                i = bisect.bisect_right(self.addresses, v) - 1
                if i >= 0:
                    return self.names[i]
                break
        return f"?{self.name}+{file_offset:#x}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--all-threads", action="store_true")
    ap.add_argument("--callers", action="append", default=[])
    ap.add_argument("--only", action="append", default=[],
                    help="keep the samples with a function matching this on the stack")
    ap.add_argument("--exclude", action="append", default=[],
                    help="drop the samples with a function matching this on the stack")
    args = ap.parse_args()
    maps, samples, main_tid = [], [], None
    for line in open(args.file):
        if line.startswith("map "):
            parts = line[4:].split()
            if len(parts) >= 6 and "x" in parts[1]:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                maps.append((lo, hi, int(parts[2], 16), parts[5]))
        elif line.startswith("main "):
            main_tid = int(line.split()[1])
        elif line.startswith("s "):
            parts = line.split()
            samples.append((int(parts[1]), [int(x, 16) for x in parts[2:]]))
    maps.sort()
    starts = [m[0] for m in maps]
    modules = {}
    cache = {}

    def name(addr, leaf):
        key = (addr, leaf)
        if key in cache:
            return cache[key]
        i = bisect.bisect_right(starts, addr) - 1
        if i < 0 or addr >= maps[i][1]:
            result = ("?", f"?{addr:#x}")
        else:
            lo, _, off, path = maps[i]
            module = modules.get(path) or modules.setdefault(path, Module(path))
            # A return address points after its call: look up the call itself.
            result = (module.name, module.symbol(addr - lo + off - (0 if leaf else 1)))
        cache[key] = result
        return result

    threads = collections.Counter(t for t, _ in samples)
    print(f"{len(samples)} samples; threads {threads.most_common(8)}; main {main_tid}")
    chosen = [s for s in samples if args.all_threads or s[0] == main_tid]
    selfs, incl, mods = collections.Counter(), collections.Counter(), collections.Counter()
    callers = {c: (collections.Counter(), collections.Counter(), [0]) for c in args.callers}
    kept = 0
    for _, frames in chosen:
        # The sampler's own frames, then the signal trampoline, then the interrupted
        # instruction (a leaf: its address is not a return address).
        while frames and name(frames[0], False)[0] == "libhost_samples.so":
            frames = frames[1:]
        frames = frames[1:]
        named = [name(a, k == 0) for k, a in enumerate(frames)]
        if not named:
            continue
        if any(not any(o in n for _, n in named) for o in args.only):
            continue
        if any(any(x in n for _, n in named) for x in args.exclude):
            continue
        kept += 1
        selfs[named[0][1][:160]] += 1
        mods[named[0][0]] += 1
        for fn in set(n for _, n in named):
            incl[fn[:160]] += 1
        for c, (up, down, count) in callers.items():
            idx = next((k for k, (_, n) in enumerate(named) if c in n), None)
            if idx is None:
                continue
            count[0] += 1
            if idx + 1 < len(named):
                up[named[idx + 1][1][:160]] += 1
            for fn in set(n for _, n in named[:idx]):
                down[fn[:160]] += 1
    total = max(1, kept)
    print(f"\n== modules (self), {total} samples")
    for m, c in mods.most_common(12):
        print(f"{100 * c / total:6.1f}%  {m}")
    print("\n== self")
    for f, c in selfs.most_common(args.top):
        print(f"{100 * c / total:6.1f}%  {f}")
    print("\n== inclusive")
    for f, c in incl.most_common(args.top * 2):
        print(f"{100 * c / total:6.1f}%  {f}")
    for c, (up, down, count) in callers.items():
        print(f"\n== {c}: {count[0]} samples ({100 * count[0] / total:.1f}%); called from")
        for f, k in up.most_common(8):
            print(f"{100 * k / total:6.1f}%  {f}")
        print("-- what it calls (inclusive)")
        for f, k in down.most_common(args.top):
            print(f"{100 * k / total:6.1f}%  {f}")


if __name__ == "__main__":
    main()
