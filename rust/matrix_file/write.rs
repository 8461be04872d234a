//! Writing a matrix file atomically: validate, stream the sections through a CRC-32, write
//! the header last, fsync, rename, fsync the directory.

use std::fs::{self, File};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::header::{Header, Layout, Shape};
use super::{as_bytes, Dtype, Plain, ALIGN, HEADER_LEN, MAX_DIM, MAX_MASK_WORDS, MAX_MODEL_ID_LEN};
use crate::error::{Error, Result};

/// The quantized form of the rows to write, matching the file's dtype.
#[derive(Debug, Clone, Copy)]
pub enum Quantized<'a> {
    /// f32 storage: nothing besides the f32 rows.
    None,
    /// int8 codes (`rows x dim`, unpadded) and one scale per row.
    Int8 { codes: &'a [i8], scales: &'a [f32] },
    /// bf16 bits (`rows x dim`, unpadded).
    Bf16 { bits: &'a [u16] },
}

/// Everything a matrix file holds, ready to write. Rows are unpadded (`dim` values each);
/// the writer adds the stride padding.
#[derive(Debug, Clone, Copy)]
pub struct MatrixData<'a> {
    /// Values per row.
    pub dim: usize,
    /// Number of rows.
    pub rows: usize,
    /// Identifier of the model that produced the vectors, stored verbatim.
    pub model_id: &'a str,
    /// One caller-defined id per row.
    pub ids: &'a [u64],
    /// Required-flag masks, `rows x mask_words` u64 words.
    pub masks: &'a [u64],
    /// Words per mask (0: no masks).
    pub mask_words: usize,
    /// The exact rows, `rows x dim`.
    pub f32_rows: &'a [f32],
    /// The quantized rows; its variant decides the file's dtype.
    pub quantized: Quantized<'a>,
    /// Quantization residual (see [`crate::quantize`]); 0 for f32.
    pub residual: f32,
}

impl MatrixData<'_> {
    fn dtype(&self) -> Dtype {
        match self.quantized {
            Quantized::None => Dtype::F32,
            Quantized::Int8 { .. } => Dtype::Int8,
            Quantized::Bf16 { .. } => Dtype::Bf16,
        }
    }

    fn validate(&self) -> Result<(Shape, Layout)> {
        let (dim, rows) = (self.dim, self.rows);
        if dim == 0 || dim > MAX_DIM {
            return Err(Error::invalid(format!("dimension must be in 1..={MAX_DIM}, got {dim}")));
        }
        if u32::try_from(rows).is_err() {
            return Err(Error::invalid(format!("an index holds at most 2^32-1 rows, got {rows}")));
        }
        if self.mask_words > MAX_MASK_WORDS {
            return Err(Error::invalid(format!(
                "at most {MAX_MASK_WORDS} mask words per row, got {}",
                self.mask_words
            )));
        }
        if self.model_id.len() > MAX_MODEL_ID_LEN {
            return Err(Error::invalid(format!(
                "model id is {} bytes, at most {MAX_MODEL_ID_LEN} allowed",
                self.model_id.len()
            )));
        }
        let expect = |what: &str, got: usize, want: usize| {
            if got == want {
                Ok(())
            } else {
                Err(Error::invalid(format!("{what} has {got} values, expected {want}")))
            }
        };
        expect("f32 rows", self.f32_rows.len(), rows * dim)?;
        expect("row ids", self.ids.len(), rows)?;
        expect("masks", self.masks.len(), rows * self.mask_words)?;
        match self.quantized {
            Quantized::None => {}
            Quantized::Int8 { codes, scales } => {
                expect("int8 codes", codes.len(), rows * dim)?;
                expect("int8 scales", scales.len(), rows)?;
                // What open refuses is not written.
                if let Some(row) = scales.iter().position(|s| !(s.is_finite() && *s >= 0.0)) {
                    return Err(Error::invalid(format!(
                        "int8 scale of row {row} is {}, not a finite value >= 0",
                        scales[row]
                    )));
                }
            }
            Quantized::Bf16 { bits } => expect("bf16 rows", bits.len(), rows * dim)?,
        }
        let shape = Shape {
            dtype: self.dtype(),
            dim,
            rows,
            mask_words: self.mask_words,
            model_id_len: self.model_id.len(),
        };
        let layout =
            shape.layout().ok_or_else(|| Error::invalid("index too large for this platform"))?;
        Ok((shape, layout))
    }
}

/// Writes `data` to `path` atomically: a temporary file in the same directory is written,
/// flushed to disk, then renamed over `path`, and the directory is synced. Readers see either
/// the old file or the complete new one, never a partial write.
pub fn write(path: &Path, data: &MatrixData<'_>) -> Result<()> {
    let (shape, layout) = data.validate()?;
    let io_err = |source: io::Error| Error::Io { path: path.to_path_buf(), source };
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let temp = temp_path(path);
    let result = (|| -> io::Result<()> {
        let file = create_private(&temp)?;
        let mut out = ChecksumWriter::new(BufWriter::with_capacity(1 << 20, file));
        out.write_all(&[0u8; HEADER_LEN])?;
        out.reset_checksum();
        write_sections(&mut out, data, &layout)?;
        let payload_crc = out.checksum();
        let mut file = out.into_inner().into_inner().map_err(io::IntoInnerError::into_error)?;
        file.seek(SeekFrom::Start(0))?;
        file.write_all(&Header::encode(&shape, &layout, data.residual, payload_crc))?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temp, path)?;
        sync_dir(&dir)
    })();
    if result.is_err() {
        // Best effort: the original error is the one worth reporting.
        let _ = fs::remove_file(&temp);
    }
    result.map_err(io_err)
}

/// A new file at `path` (never one that exists), readable and writable by its owner only, as
/// a router's other files are: its index tells which tools a deployment has, as its catalog
/// does. The mode is set at creation, so no other user opens it before a chmod.
pub(crate) fn create_private(path: &Path) -> io::Result<File> {
    let mut options = File::options();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

fn temp_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.tmp-{}-{unique}", std::process::id()))
}

#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    // Windows cannot open a directory as a file; rename is already durable there (MoveFileEx).
    Ok(())
}

fn write_sections<W: Write>(
    out: &mut ChecksumWriter<W>,
    data: &MatrixData<'_>,
    layout: &Layout,
) -> io::Result<()> {
    out.pad_to(layout.model_id_off)?;
    out.write_all(data.model_id.as_bytes())?;
    out.pad_to(layout.ids_off)?;
    out.write_all(as_bytes(data.ids))?;
    out.pad_to(layout.masks_off)?;
    out.write_all(as_bytes(data.masks))?;
    out.pad_to(layout.scales_off)?;
    if let Quantized::Int8 { scales, .. } = data.quantized {
        out.write_all(as_bytes(scales))?;
    }
    out.pad_to(layout.quant_off)?;
    match data.quantized {
        Quantized::None => {}
        Quantized::Int8 { codes, .. } => {
            write_rows(out, codes, data.dim, layout.quant_stride)?;
        }
        Quantized::Bf16 { bits } => write_rows(out, bits, data.dim, layout.quant_stride)?,
    }
    out.pad_to(layout.f32_off)?;
    write_rows(out, data.f32_rows, data.dim, layout.stride)?;
    debug_assert_eq!(out.position, layout.file_len);
    Ok(())
}

fn write_rows<W: Write, T: Plain>(
    out: &mut ChecksumWriter<W>,
    values: &[T],
    dim: usize,
    stride: usize,
) -> io::Result<()> {
    let padding = vec![0u8; (stride - dim) * std::mem::size_of::<T>()];
    for row in values.chunks_exact(dim) {
        out.write_all(as_bytes(row))?;
        out.write_all(&padding)?;
    }
    Ok(())
}

/// A writer that tracks its position and a running CRC-32 of what went through it.
struct ChecksumWriter<W> {
    inner: W,
    hasher: crc32fast::Hasher,
    position: usize,
}

impl<W: Write> ChecksumWriter<W> {
    fn new(inner: W) -> Self {
        Self { inner, hasher: crc32fast::Hasher::new(), position: 0 }
    }

    fn reset_checksum(&mut self) {
        self.hasher = crc32fast::Hasher::new();
    }

    fn checksum(&self) -> u32 {
        self.hasher.clone().finalize()
    }

    fn pad_to(&mut self, offset: usize) -> io::Result<()> {
        debug_assert!(offset >= self.position);
        let zeros = [0u8; ALIGN];
        while self.position < offset {
            let n = (offset - self.position).min(ALIGN);
            self.write_all(&zeros[..n])?;
        }
        Ok(())
    }

    fn into_inner(self) -> W {
        self.inner
    }
}

impl<W: Write> Write for ChecksumWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.position += n;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
