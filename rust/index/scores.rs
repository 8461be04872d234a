//! Scores and vectors at chosen rows, without a top-k: what a caller re-ranking, rebuilding
//! or comparing rows reads from an opened index.

use rayon::prelude::*;

use super::{pool, Index};
use crate::error::{Error, Result};
use crate::kernels;
use crate::matrix_file::Dtype;

impl Index {
    /// Scan scores of `query` against every row, at the storage precision (exact for f32,
    /// within [`Index::score_error_bound`] of exact for int8 / bf16).
    pub fn scores(&self, query: &[f32]) -> Result<Vec<f32>> {
        let query = self.prepare_queries(self.one_query(query)?)?;
        let mut out = vec![0f32; self.len()];
        if self.is_empty() {
            return Ok(out);
        }
        let chunk = self.len().div_ceil(self.threads);
        let score_chunk = |(index, out): (usize, &mut [f32])| {
            let start = index * chunk;
            self.scan_rows(&query, start..start + out.len(), out);
        };
        self.guarded(|| {
            match (self.threads > 1).then(pool::current).flatten() {
                Some(pool) => {
                    pool.install(|| out.par_chunks_mut(chunk).enumerate().for_each(score_chunk));
                }
                None => out.chunks_mut(chunk).enumerate().for_each(score_chunk),
            }
            Ok(out)
        })
    }

    /// [`Index::scores`] of each of `queries.len() / dim` queries, stored back to back: one
    /// run of `len()` scores per query, bitwise equal to [`Index::scores`] of that query.
    ///
    /// On one thread the batch kernels score every query against a block of rows before the
    /// next block is read, so the matrix is read once for all of them, not once per query;
    /// with several threads each query's scan is split over them instead.
    pub fn scores_batch(&self, queries: &[f32]) -> Result<Vec<f32>> {
        if self.threads > 1 {
            let mut out = Vec::with_capacity(queries.len() / self.dim().max(1) * self.len());
            for query in queries.chunks(self.dim().max(1)) {
                out.extend(self.scores(query)?);
            }
            return Ok(out);
        }
        let queries = self.prepare_queries(queries)?;
        let n_queries = queries.len() / self.dim();
        let mut out = vec![0f32; n_queries * self.len()];
        if self.is_empty() {
            return Ok(out);
        }
        let file = &self.file;
        self.guarded(|| {
            match file.dtype() {
                Dtype::F32 => {
                    let rows = file.f32_rows();
                    kernels::scan_f32_batch(&queries, n_queries, rows, file.stride(), &mut out);
                }
                Dtype::Int8 => {
                    let (codes, scales) = file.int8_rows().expect("int8 storage");
                    let stride = file.quant_stride();
                    kernels::scan_i8_batch(&queries, n_queries, codes, stride, scales, &mut out);
                }
                Dtype::Bf16 => {
                    let bits = file.bf16_rows().expect("bf16 storage");
                    let stride = file.quant_stride();
                    kernels::scan_bf16_batch(&queries, n_queries, bits, stride, &mut out);
                }
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The stored (normalised) f32 vectors of `rows`, back to back: what a caller rebuilding
    /// an index reuses for rows whose content did not change, instead of embedding them again.
    pub fn vectors(&self, rows: &[u32]) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(rows.len() * self.dim());
        self.guarded(|| {
            for &row in rows {
                if row as usize >= self.len() {
                    return Err(Error::invalid(format!(
                        "row {row} is out of range for an index of {} rows",
                        self.len()
                    )));
                }
                out.extend_from_slice(self.f32_row(row));
            }
            Ok(out)
        })
    }

    /// Exact f32 scores of `query` against `rows` (e.g. to re-score candidates picked from
    /// [`Index::scores`] of a quantized index).
    pub fn rescore(&self, query: &[f32], rows: &[u32]) -> Result<Vec<f32>> {
        let query = self.prepare_queries(self.one_query(query)?)?;
        self.guarded(|| {
            rows.iter()
                .map(|&row| {
                    if (row as usize) < self.len() {
                        Ok(self.exact_score(&query, row))
                    } else {
                        Err(Error::invalid(format!(
                            "row {row} is out of range for an index of {} rows",
                            self.len()
                        )))
                    }
                })
                .collect()
        })
    }

    /// Scan scores (the storage precision, as [`Index::scores`] gives them) of each of
    /// `queries.len() / dim` queries, stored back to back, at `rows`: `rows.len()` scores per
    /// query, query after query.
    ///
    /// The rows are gathered once and scored by the batch kernels, so a few hundred rows cost
    /// microseconds, and their compact copies are still in cache after a scan: cheaper than
    /// [`Index::rescore`], whose f32 rows an int8 scan never touched.
    pub fn scores_at(&self, queries: &[f32], rows: &[u32]) -> Result<Vec<f32>> {
        let queries = self.prepare_queries(queries)?;
        if let Some(&row) = rows.iter().find(|&&row| row as usize >= self.len()) {
            return Err(Error::invalid(format!(
                "row {row} is out of range for an index of {} rows",
                self.len()
            )));
        }
        let n_queries = queries.len() / self.dim();
        let mut out = vec![0f32; n_queries * rows.len()];
        if rows.is_empty() {
            return Ok(out);
        }
        let file = &self.file;
        fn gather<T: Copy>(all: &[T], rows: &[u32], stride: usize) -> Vec<T> {
            rows.iter().flat_map(|&row| &all[row as usize * stride..][..stride]).copied().collect()
        }
        self.guarded(|| {
            match file.dtype() {
                Dtype::F32 => {
                    let stride = file.stride();
                    let gathered = gather(file.f32_rows(), rows, stride);
                    kernels::scan_f32_batch(&queries, n_queries, &gathered, stride, &mut out);
                }
                Dtype::Int8 => {
                    let (codes, scales) = file.int8_rows().expect("int8 storage");
                    let stride = file.quant_stride();
                    let gathered = gather(codes, rows, stride);
                    let scales: Vec<f32> = rows.iter().map(|&row| scales[row as usize]).collect();
                    kernels::scan_i8_batch(
                        &queries, n_queries, &gathered, stride, &scales, &mut out,
                    );
                }
                Dtype::Bf16 => {
                    let stride = file.quant_stride();
                    let gathered = gather(file.bf16_rows().expect("bf16 storage"), rows, stride);
                    kernels::scan_bf16_batch(&queries, n_queries, &gathered, stride, &mut out);
                }
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// The cosine of two rows' stored f32 vectors (normalised, so their dot product).
    ///
    /// # Panics
    /// If a row is out of range.
    pub fn row_cosine(&self, a: u32, b: u32) -> f32 {
        kernels::dot_f32(self.f32_row(a), self.f32_row(b))
    }
}
