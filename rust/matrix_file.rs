//! The on-disk embedding matrix: header, checksum, atomic write, zero-copy mmap open.
