//! The 128-byte header: the shape fields, the section layout they imply, parsing with every
//! sanity check, and encoding with both checksums. The byte table is in the parent module.

use super::{
    Dtype, ALIGN, FORMAT_VERSION, HEADER_LEN, MAGIC, MAX_DIM, MAX_MASK_WORDS, MAX_MODEL_ID_LEN,
};

/// Where each section lives; a pure function of the header's shape fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) stride: usize,
    pub(super) quant_stride: usize,
    pub(super) model_id_off: usize,
    pub(super) ids_off: usize,
    pub(super) masks_off: usize,
    pub(super) scales_off: usize,
    pub(super) quant_off: usize,
    pub(super) f32_off: usize,
    pub(super) file_len: usize,
}

/// The shape fields a layout is derived from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Shape {
    pub(super) dtype: Dtype,
    pub(super) dim: usize,
    pub(super) rows: usize,
    pub(super) mask_words: usize,
    pub(super) model_id_len: usize,
}

impl Shape {
    /// `None` when a size overflows `usize`, which only a hostile header can cause.
    pub(super) fn layout(self) -> Option<Layout> {
        let stride = self.dim.checked_next_multiple_of(ALIGN / 4)?;
        let quant_stride = match self.dtype.quantized_size() {
            Some(size) => self.dim.checked_next_multiple_of(ALIGN / size)?,
            None => 0,
        };
        let quant_size = self.dtype.quantized_size().unwrap_or(0);
        let scales_len = if self.dtype == Dtype::Int8 { 4 * self.rows } else { 0 };
        let mut end = HEADER_LEN;
        let mut place = |len: Option<usize>| -> Option<usize> {
            let start = end.checked_next_multiple_of(ALIGN)?;
            end = start.checked_add(len?)?;
            Some(start)
        };
        let model_id_off = place(Some(self.model_id_len))?;
        let ids_off = place(self.rows.checked_mul(8))?;
        let masks_off = place(self.rows.checked_mul(self.mask_words)?.checked_mul(8))?;
        let scales_off = place(Some(scales_len))?;
        let quant_off = place(self.rows.checked_mul(quant_stride)?.checked_mul(quant_size))?;
        let f32_off = place(self.rows.checked_mul(stride)?.checked_mul(4))?;
        Some(Layout {
            stride,
            quant_stride,
            model_id_off,
            ids_off,
            masks_off,
            scales_off,
            quant_off,
            f32_off,
            file_len: end,
        })
    }
}

/// The parsed header fields.
pub(super) struct Header {
    pub(super) shape: Shape,
    pub(super) stride: usize,
    pub(super) quant_stride: usize,
    pub(super) offsets: [usize; 7],
    pub(super) residual: f32,
    pub(super) payload_crc: u32,
}

impl Header {
    pub(super) fn parse(h: &[u8]) -> std::result::Result<Self, String> {
        let u32_at = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
        let size_at = |at: usize| usize::try_from(u64_at(at)).unwrap_or(usize::MAX);
        if h[..8] != MAGIC {
            return Err(format!(
                "not a toolgate index: magic bytes are {:?}, expected {:?}",
                String::from_utf8_lossy(&h[..8]),
                String::from_utf8_lossy(&MAGIC)
            ));
        }
        let version = u32_at(8);
        if version != FORMAT_VERSION {
            return Err(format!(
                "format version {version} is not supported (this build reads version \
                 {FORMAT_VERSION}); rebuild the index"
            ));
        }
        let mut zeroed = [0u8; HEADER_LEN];
        zeroed.copy_from_slice(h);
        zeroed[108..112].fill(0);
        let (stored, computed) = (u32_at(108), crc32fast::hash(&zeroed));
        if stored != computed {
            return Err(format!(
                "header checksum mismatch (stored {stored:08x}, computed {computed:08x}): \
                 the header is corrupted"
            ));
        }
        if h[112..].iter().any(|&b| b != 0) {
            return Err("reserved header bytes are not zero".into());
        }
        let dtype = Dtype::from_code(u32_at(12))
            .ok_or_else(|| format!("unknown dtype code {}", u32_at(12)))?;
        let dim = u32_at(16) as usize;
        if dim == 0 || dim > MAX_DIM {
            return Err(format!("dimension {dim} is outside 1..={MAX_DIM}"));
        }
        let mask_words = u32_at(20) as usize;
        if mask_words > MAX_MASK_WORDS {
            return Err(format!("{mask_words} mask words per row, at most {MAX_MASK_WORDS}"));
        }
        let rows = u64_at(24);
        if rows > u64::from(u32::MAX) {
            return Err(format!("{rows} rows, at most 2^32-1 supported"));
        }
        let model_id_len = u32_at(40) as usize;
        if model_id_len > MAX_MODEL_ID_LEN {
            return Err(format!("model id length {model_id_len}, at most {MAX_MODEL_ID_LEN}"));
        }
        let residual = f32::from_le_bytes(h[44..48].try_into().expect("4 bytes"));
        if !(residual.is_finite() && residual >= 0.0) {
            return Err(format!("quantization residual {residual} is not a finite value >= 0"));
        }
        let mut offsets = [0usize; 7];
        for (i, offset) in offsets.iter_mut().enumerate() {
            *offset = size_at(48 + 8 * i);
        }
        Ok(Self {
            shape: Shape { dtype, dim, rows: rows as usize, mask_words, model_id_len },
            stride: u32_at(32) as usize,
            quant_stride: u32_at(36) as usize,
            offsets,
            residual,
            payload_crc: u32_at(104),
        })
    }

    pub(super) fn check_layout(&self, layout: &Layout) -> std::result::Result<(), String> {
        if self.stride != layout.stride || self.quant_stride != layout.quant_stride {
            return Err(format!(
                "row strides {}/{} do not match dimension {} (expected {}/{})",
                self.stride, self.quant_stride, self.shape.dim, layout.stride, layout.quant_stride
            ));
        }
        let expected = [
            layout.model_id_off,
            layout.ids_off,
            layout.masks_off,
            layout.scales_off,
            layout.quant_off,
            layout.f32_off,
            layout.file_len,
        ];
        if self.offsets != expected {
            return Err(format!(
                "section offsets {:?} do not match the header's shape (expected {expected:?})",
                self.offsets
            ));
        }
        Ok(())
    }

    /// The header bytes for a file of `shape` laid out as `layout`, with both checksums.
    pub(super) fn encode(
        shape: &Shape,
        layout: &Layout,
        residual: f32,
        payload_crc: u32,
    ) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        let mut put = |at: usize, bytes: &[u8]| h[at..at + bytes.len()].copy_from_slice(bytes);
        let u32_of = |x: usize| u32::try_from(x).expect("validated to fit in u32");
        put(0, &MAGIC);
        put(8, &FORMAT_VERSION.to_le_bytes());
        put(12, &shape.dtype.code().to_le_bytes());
        put(16, &u32_of(shape.dim).to_le_bytes());
        put(20, &u32_of(shape.mask_words).to_le_bytes());
        put(24, &(shape.rows as u64).to_le_bytes());
        put(32, &u32_of(layout.stride).to_le_bytes());
        put(36, &u32_of(layout.quant_stride).to_le_bytes());
        put(40, &u32_of(shape.model_id_len).to_le_bytes());
        put(44, &residual.to_le_bytes());
        let offsets = [
            layout.model_id_off,
            layout.ids_off,
            layout.masks_off,
            layout.scales_off,
            layout.quant_off,
            layout.f32_off,
            layout.file_len,
        ];
        for (i, offset) in offsets.into_iter().enumerate() {
            put(48 + 8 * i, &(offset as u64).to_le_bytes());
        }
        put(104, &payload_crc.to_le_bytes());
        let header_crc = crc32fast::hash(&h);
        h[108..112].copy_from_slice(&header_crc.to_le_bytes());
        h
    }
}
