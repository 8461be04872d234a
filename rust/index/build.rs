//! Building an index file: normalise the rows, quantize them for the chosen storage, write
//! the file atomically.

use std::path::Path;

use super::{normalise_rows, Index};
use crate::error::{Error, Result};
use crate::matrix_file::{self, Dtype, MatrixData, Quantized};
use crate::quantize;

/// What to store besides the vectors when building an index.
#[derive(Debug, Clone, Copy)]
pub struct BuildOptions<'a> {
    /// Storage of the scanned matrix.
    pub dtype: Dtype,
    /// Identifier of the embedding model, stored verbatim.
    pub model_id: &'a str,
    /// One caller-defined id per row; `None` stores `0..rows`.
    pub ids: Option<&'a [u64]>,
    /// Required-flag masks, `rows x mask_words` words; empty with `mask_words == 0` for none.
    pub masks: &'a [u64],
    /// Words per mask.
    pub mask_words: usize,
}

impl Index {
    /// Normalises `vectors` (`rows x dim`, row-major; a zero row stays zero), quantizes them
    /// for `options.dtype` and writes the index to `path` atomically.
    pub fn build(
        path: &Path,
        vectors: &[f32],
        dim: usize,
        options: &BuildOptions<'_>,
    ) -> Result<()> {
        if dim == 0 || !vectors.len().is_multiple_of(dim) {
            return Err(Error::invalid(format!(
                "vectors hold {} values, not a whole number of rows of dimension {dim}",
                vectors.len()
            )));
        }
        let rows = vectors.len() / dim;
        let normalised = normalise_rows(vectors, dim)?;
        let default_ids: Vec<u64>;
        let ids = match options.ids {
            Some(ids) => ids,
            None => {
                default_ids = (0..rows as u64).collect();
                &default_ids
            }
        };
        let mut data = MatrixData {
            dim,
            rows,
            model_id: options.model_id,
            ids,
            masks: options.masks,
            mask_words: options.mask_words,
            f32_rows: &normalised,
            quantized: Quantized::None,
            residual: 0.0,
        };
        match options.dtype {
            Dtype::F32 => matrix_file::write(path, &data),
            Dtype::Int8 => {
                let q = quantize::to_int8(&normalised, dim);
                data.quantized = Quantized::Int8 { codes: &q.codes, scales: &q.scales };
                data.residual = q.residual;
                matrix_file::write(path, &data)
            }
            Dtype::Bf16 => {
                let q = quantize::to_bf16(&normalised, dim);
                data.quantized = Quantized::Bf16 { bits: &q.bits };
                data.residual = q.residual;
                matrix_file::write(path, &data)
            }
        }
    }
}
