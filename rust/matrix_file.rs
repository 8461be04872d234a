//! The on-disk embedding matrix: header, checksum, atomic write, zero-copy mmap open.
//!
//! # Layout (format version 1, little-endian)
//!
//! A 128-byte header, then sections, each starting on a 64-byte boundary:
//!
//! | offset | field                                                                   |
//! |-------:|-------------------------------------------------------------------------|
//! | 0      | magic `b"TGINDEX\x1a"`                                                  |
//! | 8      | u32 format version (1)                                                  |
//! | 12     | u32 dtype: 1 f32, 2 int8, 3 bf16                                        |
//! | 16     | u32 dimension                                                           |
//! | 20     | u32 mask words per row (64 flags each; 0 = no gating masks)             |
//! | 24     | u64 row count                                                           |
//! | 32     | u32 f32 row stride, u32 quantized row stride (elements; 0 for f32)      |
//! | 40     | u32 model id length, f32 quantization residual                          |
//! | 48     | u64 offsets: model id, row ids, masks, scales, quantized rows, f32 rows |
//! | 96     | u64 file length                                                         |
//! | 104    | u32 CRC-32 of bytes 128.., u32 CRC-32 of the header (this field zeroed) |
//! | 112    | 16 reserved bytes, zero                                                 |
//!
//! Sections: model id (UTF-8), row ids (u64 per row), masks (`words` u64 per row), scales (f32
//! per row, int8 only), quantized rows (int8 or bf16, int8/bf16 only), f32 rows. Every row
//! starts 64-byte aligned (strides are padded with zeros), which suits every SIMD load width.
//!
//! int8 and bf16 files keep the f32 rows as well, for exact re-scoring: the file is 1.25x
//! (int8) or 1.5x (bf16) the size of an f32 one, but a search reads only the quantized
//! section plus the f32 rows of a few dozen candidates, so the hot working set is 1/4 (int8)
//! or 1/2 (bf16) of the f32 one.
//!
//! # Integrity
//!
//! Opening always checks the magic, version, header checksum and that every size and offset
//! agrees with the dimension and row count, so a truncated or inconsistent file is rejected
//! before any row is read. The payload checksum reads the whole file; [`OpenOptions::verify`]
//! (on by default) runs it at open. Callers that open large indexes often may turn it off and
//! call [`MatrixFile::verify`] when convenient.
//!
//! Files are only ever replaced by atomic rename, never modified in place, so a mapping held
//! by a reader keeps seeing the complete file it opened. A file changed in place all the same
//! (`cp` over a live index truncates it, and touching a mapped page past the new end kills
//! the process with SIGBUS) is caught by [`MatrixFile::check_unchanged`]: the length and mtime
//! of the open file, compared with those at open by one `fstat`. [`crate::index::Index`]
//! runs it before and after every read of the rows, so a change between searches is an
//! [`Error::Format`], and so is a same-size rewrite during one. A truncation in the
//! microseconds between the check and the read can still fault: replace files by rename.

mod header;
mod write;

use std::fs::{File, Metadata};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use memmap2::Mmap;

use crate::error::{Error, Result};
use header::{Header, Layout, Shape};
pub(crate) use write::create_private;
pub use write::{write, MatrixData, Quantized};

#[cfg(target_endian = "big")]
compile_error!("the toolgate index format is little-endian and is mapped without conversion");

/// The first eight bytes of every index file. The `\x1a` catches text-mode mangling.
pub const MAGIC: [u8; 8] = *b"TGINDEX\x1a";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Header size in bytes.
pub const HEADER_LEN: usize = 128;
/// Alignment of every section and every row, in bytes.
pub const ALIGN: usize = 64;
/// Largest dimension accepted, a guard against absurd headers.
pub const MAX_DIM: usize = 1 << 16;
/// Largest number of mask words per row (65,536 flags).
pub const MAX_MASK_WORDS: usize = 1024;
/// Largest model id, in bytes.
pub const MAX_MODEL_ID_LEN: usize = 4096;

/// Storage type of the scanned matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// 4 bytes per value; scanned directly.
    F32,
    /// 1 byte per value plus an f32 scale per row; re-scored in f32.
    Int8,
    /// 2 bytes per value (upper half of an f32); re-scored in f32.
    Bf16,
}

impl Dtype {
    /// Every storage type, in the order of their codes.
    pub const ALL: [Dtype; 3] = [Dtype::F32, Dtype::Int8, Dtype::Bf16];

    /// The name used in the Python API: `"f32"`, `"int8"` or `"bf16"`.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Int8 => "int8",
            Dtype::Bf16 => "bf16",
        }
    }

    /// Parses a name produced by [`Dtype::name`].
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL.into_iter().find(|d| d.name() == name).ok_or_else(|| {
            Error::invalid(format!(
                "unknown dtype {name:?}; expected \"f32\", \"int8\" or \"bf16\""
            ))
        })
    }

    pub(super) fn code(self) -> u32 {
        match self {
            Dtype::F32 => 1,
            Dtype::Int8 => 2,
            Dtype::Bf16 => 3,
        }
    }

    pub(super) fn from_code(code: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.code() == code)
    }

    /// Bytes per value of the quantized matrix; `None` for f32 (no quantized matrix).
    pub(super) fn quantized_size(self) -> Option<usize> {
        match self {
            Dtype::F32 => None,
            Dtype::Int8 => Some(1),
            Dtype::Bf16 => Some(2),
        }
    }
}

/// Types every bit pattern of which is a valid value, with no padding: safe to view as bytes
/// and to view bytes as. Sealed to the four types the format uses.
pub trait Plain: Copy + sealed::Sealed {}

mod sealed {
    pub trait Sealed {}
}

macro_rules! plain {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Plain for $t {}
    )*};
}
plain!(u8, i8, u16, u32, u64, f32);

pub(crate) fn as_bytes<T: Plain>(values: &[T]) -> &[u8] {
    // SAFETY: `T: Plain` has no padding and no invalid bit patterns, u8 has alignment 1, and
    // the byte length is exactly that of `values`.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
}

fn cast_slice<T: Plain>(bytes: &[u8]) -> &[T] {
    // SAFETY: every bit pattern is a valid `T` (`Plain`); `align_to` only returns a correctly
    // aligned middle part, and the assert below rejects any misaligned or ragged input.
    let (head, body, tail) = unsafe { bytes.align_to::<T>() };
    assert!(head.is_empty() && tail.is_empty(), "section misaligned; checked at open");
    body
}

/// How to open a matrix file.
#[derive(Debug, Clone, Copy)]
pub struct OpenOptions {
    /// Check the payload CRC-32 at open (reads the whole file once). On by default.
    pub verify: bool,
    /// Reject the file unless its dimension is this one.
    pub expected_dim: Option<usize>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self { verify: true, expected_dim: None }
    }
}

/// Opens `path` for reading, refusing anything but a regular file first: opening a FIFO
/// blocks, and a device (`/dev/zero`) or a directory has no length to check.
pub(crate) fn open_regular(path: &Path) -> Result<(File, Metadata)> {
    let io_err = |source| Error::Io { path: path.to_path_buf(), source };
    let not_regular = || {
        Error::format(path, "not a regular file (a directory, a device or a pipe): not an index")
    };
    if !std::fs::metadata(path).map_err(io_err)?.is_file() {
        return Err(not_regular());
    }
    let file = File::open(path).map_err(io_err)?;
    // Checked again on the open file: the path may have been replaced in between.
    let metadata = file.metadata().map_err(io_err)?;
    if !metadata.is_file() {
        return Err(not_regular());
    }
    Ok((file, metadata))
}

/// What identifies the content of an open file without reading it: its length and mtime.
/// Not its ctime, which unlinking changes: replacing a file by rename, the safe way, unlinks
/// the inode a reader keeps mapped, and that must not look like a change to its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
}

impl Stamp {
    fn of(metadata: &Metadata) -> Self {
        Self { len: metadata.len(), modified: metadata.modified().ok() }
    }
}

/// A matrix file mapped read-only. Cheap to share between threads: every accessor borrows
/// the mapping, nothing is copied.
#[derive(Debug)]
pub struct MatrixFile {
    path: PathBuf,
    file: File,
    stamp: Stamp,
    map: Mmap,
    model_id: String,
    shape: Shape,
    layout: Layout,
    residual: f32,
    payload_crc: u32,
}

impl MatrixFile {
    /// Maps `path` and checks its header (see the module docs for what is checked).
    pub fn open(path: &Path, options: OpenOptions) -> Result<Self> {
        let io_err = |source| Error::Io { path: path.to_path_buf(), source };
        let (file, metadata) = open_regular(path)?;
        let stamp = Stamp::of(&metadata);
        let actual_len = stamp.len;
        let bad = |reason: String| Error::format(path, reason);
        if actual_len < HEADER_LEN as u64 {
            return Err(bad(format!(
                "truncated: {actual_len} bytes, shorter than the {HEADER_LEN}-byte header"
            )));
        }
        // SAFETY: the mapping is read-only and toolgate only ever replaces index files by
        // atomic rename, so the mapped inode is never written while mapped. A file changed
        // in place by other tools is caught by `check_unchanged` (see the module docs).
        let map = unsafe { Mmap::map(&file) }.map_err(io_err)?;
        if map.as_ptr().align_offset(ALIGN) != 0 {
            return Err(bad("memory map is not 64-byte aligned".into()));
        }
        let header = Header::parse(&map[..HEADER_LEN]).map_err(bad)?;
        let layout = header.shape.layout().ok_or_else(|| {
            bad("header sizes overflow (dimension, rows or model id length is corrupt)".into())
        })?;
        header.check_layout(&layout).map_err(bad)?;
        if (map.len() as u64) < layout.file_len as u64 {
            return Err(bad(format!(
                "truncated: the header describes {} bytes, the file has {}",
                layout.file_len,
                map.len()
            )));
        }
        if map.len() > layout.file_len {
            return Err(bad(format!(
                "{} unexpected bytes after the end of the index ({} bytes expected)",
                map.len() - layout.file_len,
                layout.file_len
            )));
        }
        let model_id = &map[layout.model_id_off..layout.model_id_off + header.shape.model_id_len];
        // Copied out: reading it must not touch the mapping, which may have changed by then.
        let Ok(model_id) = std::str::from_utf8(model_id).map(str::to_owned) else {
            return Err(bad("model id is not valid UTF-8".into()));
        };
        if let Some(expected) = options.expected_dim {
            if expected != header.shape.dim {
                return Err(bad(format!("dimension is {}, expected {expected}", header.shape.dim)));
            }
        }
        let file = Self {
            path: path.to_path_buf(),
            file,
            stamp,
            map,
            model_id,
            shape: header.shape,
            layout,
            residual: header.residual,
            payload_crc: header.payload_crc,
        };
        if options.verify {
            file.verify()?;
        }
        // Checksums only say the file is the one written, and any writer can reseal them: a
        // NaN or negative scale would otherwise make every search fail, blaming its query.
        if let Some((_, scales)) = file.int8_rows() {
            let bad_scale = scales.iter().enumerate().find(|(_, s)| !(s.is_finite() && **s >= 0.0));
            if let Some((row, scale)) = bad_scale {
                return Err(bad(format!(
                    "the int8 scale of row {row} ({scale}) is not a finite value >= 0"
                )));
            }
        }
        Ok(file)
    }

    /// An [`Error::Format`] if the file's length, mtime or ctime differ from those at open:
    /// it was changed in place, and reading the mapping may fault or return other data.
    pub fn check_unchanged(&self) -> Result<()> {
        let metadata =
            self.file.metadata().map_err(|source| Error::Io { path: self.path.clone(), source })?;
        let now = Stamp::of(&metadata);
        if now == self.stamp {
            return Ok(());
        }
        let what = if now.len == self.stamp.len {
            "was rewritten in place".to_owned()
        } else {
            format!("was cut or grown in place from {} to {} bytes", self.stamp.len, now.len)
        };
        Err(Error::format(
            &self.path,
            format!(
                "{what} since it was opened (a copy over a live index?): reopen it; to \
                 replace an index or a router, write a new one and rename or publish it"
            ),
        ))
    }

    /// Recomputes the payload CRC-32 and compares it with the header's. Reads every page.
    pub fn verify(&self) -> Result<()> {
        self.check_unchanged()?;
        let actual = crc32fast::hash(&self.map[HEADER_LEN..]);
        if actual == self.payload_crc {
            Ok(())
        } else {
            Err(Error::format(
                &self.path,
                format!(
                    "payload checksum mismatch (stored {:08x}, computed {actual:08x}): \
                     the file is corrupted",
                    self.payload_crc
                ),
            ))
        }
    }

    /// The path the file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Storage type of the scanned matrix.
    pub fn dtype(&self) -> Dtype {
        self.shape.dtype
    }

    /// Values per row.
    pub fn dim(&self) -> usize {
        self.shape.dim
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.shape.rows
    }

    /// Elements between the starts of consecutive f32 rows.
    pub fn stride(&self) -> usize {
        self.layout.stride
    }

    /// Elements between the starts of consecutive quantized rows (0 for f32 storage).
    pub fn quant_stride(&self) -> usize {
        self.layout.quant_stride
    }

    /// Words per gating mask (0 when the index has no masks).
    pub fn mask_words(&self) -> usize {
        self.shape.mask_words
    }

    /// The quantization residual stored at build time (0 for f32).
    pub fn residual(&self) -> f32 {
        self.residual
    }

    /// The model id the index was built with.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    fn section<T: Plain>(&self, offset: usize, count: usize) -> &[T] {
        cast_slice(&self.map[offset..offset + count * std::mem::size_of::<T>()])
    }

    /// One caller-defined id per row.
    pub fn ids(&self) -> &[u64] {
        self.section(self.layout.ids_off, self.rows())
    }

    /// Required-flag masks, `rows x mask_words`.
    pub fn masks(&self) -> &[u64] {
        self.section(self.layout.masks_off, self.rows() * self.mask_words())
    }

    /// The f32 rows, `rows x stride` (padding is zero).
    pub fn f32_rows(&self) -> &[f32] {
        self.section(self.layout.f32_off, self.rows() * self.stride())
    }

    /// The int8 codes and per-row scales, for int8 storage.
    pub fn int8_rows(&self) -> Option<(&[i8], &[f32])> {
        (self.dtype() == Dtype::Int8).then(|| {
            let codes = self.section(self.layout.quant_off, self.rows() * self.quant_stride());
            (codes, self.section(self.layout.scales_off, self.rows()))
        })
    }

    /// The bf16 rows (raw bits), for bf16 storage.
    pub fn bf16_rows(&self) -> Option<&[u16]> {
        (self.dtype() == Dtype::Bf16)
            .then(|| self.section(self.layout.quant_off, self.rows() * self.quant_stride()))
    }
}

#[cfg(test)]
mod tests;
