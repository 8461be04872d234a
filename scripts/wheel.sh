#!/usr/bin/env bash
# Builds the release wheel for manylinux2014 (glibc 2.17) with zig as the linker, then checks
# with auditwheel that the extension asks for no newer glibc symbol than its tag promises.
# Why zig: the system's own linker ties the extension to the build machine's glibc (2.34 on
# Debian 12), and a manylinux container image is not reachable from here.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv
OUT=${OUT:-dist}

# maturin packs every file under python/ that git does not ignore, committed or not: a stray
# script or a local edit would ship in the wheel.
if git rev-parse --git-dir >/dev/null 2>&1; then
    dirty=$(git status --porcelain -- python)
    if [[ -n $dirty ]]; then
        echo "wheel: python/ differs from the last commit; commit, remove or ignore these first:" >&2
        echo "$dirty" >&2
        exit 1
    fi
fi

"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements/wheel.lock
rm -f "$OUT"/toolgate_router-*.whl
# maturin finds the zig driver on PATH; a target dir of its own keeps the dev build intact.
# --features python replaces pyproject.toml's list: the release extension has no test hooks.
PATH=$PWD/$VENV/bin:$PATH "$VENV/bin/maturin" build --release --zig --features python \
    --compatibility manylinux2014 --out "$OUT" --target-dir target/wheel
wheel=$(ls "$OUT"/toolgate_router-*.whl)
"$VENV/bin/auditwheel" show "$wheel"
echo "wheel: $wheel"
