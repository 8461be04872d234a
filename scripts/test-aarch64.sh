#!/usr/bin/env bash
# Cross-compiles the Rust core for aarch64-unknown-linux-gnu and runs its `cargo test` under
# qemu-user, so the NEON kernels (rust/kernels/neon.rs) run against the float64 reference and
# the serial kernel on an x86_64 machine. Needs root (apt-get) on Debian 12 (bookworm).
#
# Why Debian's toolchain and not rustup's: rustup cannot fetch the aarch64 standard library
# here, while Debian ships it as a package. Its `rustc-web` family (bookworm-security) is new
# enough for this crate's rust-version; the arm64 std is Multi-Arch: same, so dpkg keeps it at
# exactly the compiler's version.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=aarch64-unknown-linux-gnu
MIN_RUST=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)

if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "test-aarch64: adding the arm64 package architecture"
    dpkg --add-architecture arm64
fi
PACKAGES=(rustc-web cargo-web libstd-rust-web-dev libstd-rust-web-dev:arm64 libc6:arm64
          gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static)
if ! dpkg-query -W "${PACKAGES[@]}" >/dev/null 2>&1; then
    echo "test-aarch64: installing the cross toolchain and qemu (Debian packages)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${PACKAGES[@]}" >/dev/null
fi
dpkg-query -W -f='test-aarch64: ${Package}:${Architecture} ${Version}\n' "${PACKAGES[@]}"

# Debian's cargo and rustc, not rustup's from ~/.cargo/bin (which has no aarch64 std).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export RUSTC=/usr/bin/rustc RUSTDOC=/usr/bin/rustdoc
export CARGO_TARGET_DIR=target/aarch64-qemu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# No `-L /usr/aarch64-linux-gnu` for qemu: with that cross runtime (libc6-arm64-cross
# 2.36-8cross1) qemu-user 7.2 spins forever in the first pthread_create. Without it qemu loads
# the multiarch libc6:arm64 from /lib/aarch64-linux-gnu, which works.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=qemu-aarch64-static

have=$(rustc -V | awk '{print $2}')
if [[ $(printf '%s\n%s\n' "$MIN_RUST" "$have" | sort -V | head -1) != "$MIN_RUST" ]]; then
    echo "test-aarch64: Debian's rustc $have is older than rust-version $MIN_RUST" >&2
    exit 1
fi
echo "test-aarch64: $(rustc -V), tests run under $(qemu-aarch64-static --version | head -1)"
/usr/bin/cargo test --locked --target "$TARGET"
