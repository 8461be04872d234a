//! An opened index: scanning, quantized scan with exact f32 re-scoring, gated top-k.
//!
//! # Exact results from quantized storage
//!
//! Every search, whatever the storage type, ends the same way: a set of candidate rows is
//! re-scored with [`kernels::dot_f32`] on the stored f32 rows, and the top-k is taken over
//! those exact scores. The scan only has to find a candidate set that provably contains that
//! top-k. With `a_i` the scan score and `f_i` the exact one, `|a_i - f_i| <= E` for every row
//! (see [`score_error_bound`]), so if `a_(k)` is the k-th best scan score, at least `k` rows
//! have `f >= a_(k) - E`, and no row with `a_i < a_(k) - 2E` can beat them. Keeping every row
//! with `a_i >= a_(k) - 2E` (and `a_i >= threshold - E`) is therefore enough, ties included.
//! The same reasoning with `E` = f32 rounding makes f32 storage agree bit for bit with int8
//! and bf16 storage, and with any thread split.
//!
//! The scan runs in blocks of rows small enough to stay in L2, so a batch of queries reads
//! the matrix from memory once, and each block's scores are consumed while still in L1.

use std::path::Path;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::gating::Gate;
use crate::kernels;
use crate::matrix_file::{self, Dtype, MatrixData, MatrixFile, OpenOptions, Quantized};
use crate::quantize;
use crate::topk::{Hit, TopK};

mod collect;

use collect::{Collector, QueryScan, ScanPlan};

/// How many of the best gated-out rows a search reports.
pub const GATED_REPORT_LEN: usize = 5;

/// Bytes of stored rows per scan block of a batch: inside every current core's L2 (1-2 MiB
/// on servers, 256 KiB on older parts), so every query of the batch reuses a block from cache.
const BATCH_BLOCK_BYTES: usize = 128 * 1024;

/// Rows per scan block of a single query. Nothing is reused across blocks then, so blocks are
/// as long as the score buffer allows while staying in L1 / L2 (16 KiB): each kernel call has a
/// fixed cost (the int8 kernels convert the query to i16 on every call), which short blocks
/// pay again and again (measured in docs/design.md, "Kernels and ISA dispatch").
const SINGLE_QUERY_BLOCK_ROWS: usize = 4096;

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

/// A row gated out by missing flags, reported so a caller can tell what would unlock it.
#[derive(Debug, Clone, PartialEq)]
pub struct GatedCandidate {
    /// Row number.
    pub row: u32,
    /// Its exact score.
    pub score: f32,
    /// The flags it requires that the caller did not satisfy, ascending.
    pub missing_flags: Vec<u32>,
}

/// The outcome of one search.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchResult {
    /// The eligible hits, best first (score descending, then row ascending).
    pub hits: Vec<Hit>,
    /// Rows in scope but gated out by missing flags.
    pub n_gated: usize,
    /// Rows outside the allow set or inside the deny set.
    pub n_out_of_scope: usize,
    /// The best (up to [`GATED_REPORT_LEN`]) rows gated out by missing flags that also meet
    /// the threshold, best first.
    pub gated: Vec<GatedCandidate>,
}

/// An index file opened for searching. `Sync`: one index serves any number of threads.
#[derive(Debug)]
pub struct Index {
    file: MatrixFile,
    threads: usize,
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

    /// Maps the index at `path`. `threads > 1` splits each scan over that many row ranges on
    /// the rayon pool; 1 scans on the calling thread.
    pub fn open(path: &Path, options: OpenOptions, threads: usize) -> Result<Self> {
        if threads == 0 {
            return Err(Error::invalid("threads must be at least 1"));
        }
        Ok(Self { file: MatrixFile::open(path, options)?, threads })
    }

    /// The mapped file (header fields, ids, masks).
    pub fn file(&self) -> &MatrixFile {
        &self.file
    }

    /// Path the index was opened from.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.file.rows()
    }

    /// Whether the index has no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.file.dim()
    }

    /// Number of row ranges a scan is split into.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// A gate over this index's masks with `flags` satisfied and the optional scopes.
    pub fn gate(
        &self,
        flags: &[u32],
        allow: Option<&[u32]>,
        deny: Option<&[u32]>,
    ) -> Result<Gate<'_>> {
        self.file.check_unchanged()?;
        let mut gate = Gate::new(self.len(), self.file.masks(), self.file.mask_words())?;
        gate = gate.with_flags(flags);
        if let Some(rows) = allow {
            gate = gate.with_allow(rows)?;
        }
        if let Some(rows) = deny {
            gate = gate.with_deny(rows)?;
        }
        Ok(gate)
    }

    /// The best `k` eligible rows for `query` (`usize::MAX`: no limit), with exact f32 scores
    /// at or above `threshold` when given. The query is normalised first, so scores are
    /// cosine similarities.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        threshold: Option<f32>,
        gate: &Gate<'_>,
    ) -> Result<SearchResult> {
        let mut results = self.search_batch(query, k, threshold, gate)?;
        Ok(results.pop().expect("one query in, one result out"))
    }

    /// [`Index::search`] for `queries.len() / dim` queries stored back to back, reading the
    /// matrix once for all of them.
    pub fn search_batch(
        &self,
        queries: &[f32],
        k: usize,
        threshold: Option<f32>,
        gate: &Gate<'_>,
    ) -> Result<Vec<SearchResult>> {
        if k == 0 {
            return Err(Error::invalid("k must be at least 1 (or unlimited)"));
        }
        if threshold.is_some_and(f32::is_nan) {
            return Err(Error::invalid("threshold is NaN"));
        }
        if gate.n_rows() != self.len() {
            return Err(Error::invalid(format!(
                "gate covers {} rows, the index has {}",
                gate.n_rows(),
                self.len()
            )));
        }
        let queries = self.prepare_queries(queries)?;
        let error = self.score_error_bound(&queries);
        let plan = ScanPlan { k, threshold, error, gate };
        self.guarded(|| {
            let scans = self.scan_parallel(&queries, &plan);
            Ok(queries
                .chunks_exact(self.dim())
                .zip(scans)
                .map(|(query, scan)| self.finish(query, scan, &plan))
                .collect())
        })
    }

    /// `read` of the mapped rows, between two checks that the file was not changed in place
    /// (see [`MatrixFile::check_unchanged`]): before, so a truncated file is an error and not a
    /// SIGBUS; after, so a same-size rewrite during the read is an error and not a result.
    fn guarded<T>(&self, read: impl FnOnce() -> Result<T>) -> Result<T> {
        self.file.check_unchanged()?;
        let out = read()?;
        self.file.check_unchanged()?;
        Ok(out)
    }

    /// Scan scores of `query` against every row, at the storage precision (exact for f32,
    /// within [`Index::score_error_bound`] of exact for int8 / bf16).
    pub fn scores(&self, query: &[f32]) -> Result<Vec<f32>> {
        let query = self.prepare_queries(query)?;
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
            if self.threads > 1 {
                out.par_chunks_mut(chunk).enumerate().for_each(score_chunk);
            } else {
                out.chunks_mut(chunk).enumerate().for_each(score_chunk);
            }
            Ok(out)
        })
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
        let query = self.prepare_queries(query)?;
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

    /// Largest possible `|scan score - exact score|` for the (already normalised) `queries`.
    ///
    /// For a query `q` and stored f32 row `x` (`|x| <= 1 + u` after normalisation, `u = 2^-24`)
    /// whose quantized form `y` has `|x - y| <= R` (the residual stored in the file, 0 for
    /// f32), the scan returns `fl(q.y)` and re-scoring `fl(q.x)`.
    ///
    /// * `|q.y - q.x| <= |q| R` by Cauchy-Schwarz.
    /// * Re-scoring rounds by at most `gamma(d+1) |q| |x|` in any summation order (Higham,
    ///   `gamma(n) = n u / (1 - n u)`); so does a widening scan, against `|q| |y|`, one more
    ///   rounding included for the int8 scale multiply. The integer int8 kernels sum exactly
    ///   and round three times (`gamma(3)`), hence `gamma(max(d+1, 3))` below.
    /// * The integer int8 kernels also round the query to i16 first; that shifts a score by at
    ///   most [`kernels::i8_query_rounding_bound`] for rows of norm `|y| <= 1 + u + R`.
    ///
    /// So `|fl(q.y) - fl(q.x)| <= |q| (R + gamma(max(d+1, 3)) (2 + 2u + R)) + query rounding`.
    /// A small absolute term covers the f32 rounding of the cut-off arithmetic using it.
    pub fn score_error_bound(&self, queries: &[f32]) -> f32 {
        let max_norm = queries
            .chunks_exact(self.dim())
            .map(|q| q.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt())
            .fold(0f64, f64::max);
        score_error_bound(self.dim(), self.file.dtype(), self.file.residual(), max_norm)
    }

    /// Checks shape and values, and normalises each query (a zero query stays zero).
    fn prepare_queries(&self, queries: &[f32]) -> Result<Vec<f32>> {
        let dim = self.dim();
        if queries.is_empty() || !queries.len().is_multiple_of(dim) {
            return Err(Error::invalid(format!(
                "query has {} values, the index has dimension {dim}",
                queries.len()
            )));
        }
        if let Some(position) = queries.iter().position(|x| !x.is_finite()) {
            let (query, column) = (position / dim, position % dim);
            let value = queries[position];
            let which = if queries.len() > dim { format!("query {query}") } else { "query".into() };
            return Err(Error::invalid(format!(
                "{which} holds {value} at position {column}; queries must be finite"
            )));
        }
        normalise_rows(queries, dim)
    }

    /// The cosine of two rows' stored f32 vectors (normalised, so their dot product).
    ///
    /// # Panics
    /// If a row is out of range.
    pub fn row_cosine(&self, a: u32, b: u32) -> f32 {
        kernels::dot_f32(self.f32_row(a), self.f32_row(b))
    }

    fn f32_row(&self, row: u32) -> &[f32] {
        let start = row as usize * self.file.stride();
        &self.file.f32_rows()[start..start + self.dim()]
    }

    fn exact_score(&self, query: &[f32], row: u32) -> f32 {
        kernels::dot_f32(query, self.f32_row(row))
    }

    /// Scan scores of `query` against `rows` at the storage precision into `out`.
    fn scan_rows(&self, query: &[f32], rows: std::ops::Range<usize>, out: &mut [f32]) {
        debug_assert_eq!(rows.len(), out.len());
        let file = &self.file;
        match file.dtype() {
            Dtype::F32 => {
                let stride = file.stride();
                kernels::scan_f32(query, &file.f32_rows()[rows.start * stride..], stride, out);
            }
            Dtype::Int8 => {
                let (codes, scales) = file.int8_rows().expect("int8 storage");
                let stride = file.quant_stride();
                kernels::scan_i8(query, &codes[rows.start * stride..], stride, &scales[rows], out);
            }
            Dtype::Bf16 => {
                let bits = file.bf16_rows().expect("bf16 storage");
                let stride = file.quant_stride();
                kernels::scan_bf16(query, &bits[rows.start * stride..], stride, out);
            }
        }
    }

    fn row_bytes(&self) -> usize {
        match self.file.dtype() {
            Dtype::F32 => self.file.stride() * 4,
            Dtype::Int8 => self.file.quant_stride(),
            Dtype::Bf16 => self.file.quant_stride() * 2,
        }
    }

    /// Scans every row for every query, split over `threads` row ranges when asked.
    fn scan_parallel(&self, queries: &[f32], plan: &ScanPlan<'_, '_>) -> Vec<QueryScan> {
        let n_queries = queries.len() / self.dim();
        let n = self.len();
        let threads = self.threads.min(n.div_ceil(1024)).max(1);
        if threads == 1 {
            return self.scan_range(queries, 0..n, plan);
        }
        let chunk = n.div_ceil(threads);
        let parts: Vec<Vec<QueryScan>> = (0..threads)
            .into_par_iter()
            .map(|t| self.scan_range(queries, t * chunk..((t + 1) * chunk).min(n), plan))
            .collect();
        let mut merged: Vec<QueryScan> = (0..n_queries).map(|_| QueryScan::new(plan)).collect();
        for part in parts {
            for (total, scan) in merged.iter_mut().zip(part) {
                total.merge(scan);
            }
        }
        merged
    }

    /// Scans `rows` for every query, one L2-sized block at a time.
    fn scan_range(
        &self,
        queries: &[f32],
        rows: std::ops::Range<usize>,
        plan: &ScanPlan<'_, '_>,
    ) -> Vec<QueryScan> {
        let dim = self.dim();
        let mut scans: Vec<QueryScan> =
            queries.chunks_exact(dim).map(|_| QueryScan::new(plan)).collect();
        let block_rows = if queries.len() == dim {
            SINGLE_QUERY_BLOCK_ROWS
        } else {
            (BATCH_BLOCK_BYTES / self.row_bytes()).clamp(16, SINGLE_QUERY_BLOCK_ROWS)
        };
        let mut scores = vec![0f32; block_rows.min(rows.len())];
        let mut start = rows.start;
        while start < rows.end {
            let end = (start + block_rows).min(rows.end);
            let block = &mut scores[..end - start];
            for (query, scan) in queries.chunks_exact(dim).zip(&mut scans) {
                self.scan_rows(query, start..end, block);
                scan.feed(start, block, plan.gate);
            }
            start = end;
        }
        scans
    }

    /// Re-scores the candidates of one query exactly and assembles its result.
    fn finish(&self, query: &[f32], scan: QueryScan, plan: &ScanPlan<'_, '_>) -> SearchResult {
        let floor = plan.threshold.unwrap_or(f32::NEG_INFINITY);
        let exact_top = |candidates: Collector, k: usize| {
            let mut best = TopK::new(k);
            for row in candidates.into_rows() {
                let score = self.exact_score(query, row);
                if score >= floor {
                    best.push(row, score);
                }
            }
            best.into_sorted()
        };
        let hits = exact_top(scan.eligible, plan.k);
        let gated = exact_top(scan.gated, GATED_REPORT_LEN)
            .into_iter()
            .map(|hit| GatedCandidate {
                row: hit.row,
                score: hit.score,
                missing_flags: plan.gate.missing_flags(hit.row as usize),
            })
            .collect();
        SearchResult { hits, n_gated: scan.n_gated, n_out_of_scope: scan.n_out_of_scope, gated }
    }
}

/// See [`Index::score_error_bound`].
pub fn score_error_bound(dim: usize, dtype: Dtype, residual: f32, query_norm: f64) -> f32 {
    const U: f64 = f32::EPSILON as f64 / 2.0;
    let n = (dim + 1).max(3) as f64 * U;
    let gamma = n / (1.0 - n);
    let residual = f64::from(residual);
    let query_norm = query_norm * (1.0 + 1e-6);
    let mut bound = query_norm * (residual + gamma * (2.0 + 2.0 * U + residual));
    if dtype == Dtype::Int8 {
        // The i16 query is within sqrt(d) / (2 QUERY_I16_MAX) of q in norm, which inflates the
        // rounding term above by at most twice that; the second term is the rounding itself.
        bound *= 1.0 + (dim as f64).sqrt() / f64::from(kernels::QUERY_I16_MAX);
        bound += kernels::i8_query_rounding_bound(dim, query_norm, 1.0 + 2.0 * U + residual);
    }
    (bound * (1.0 + 1e-6) + 8.0 * U) as f32
}

/// Normalises each `dim`-wide row to unit length in f64; a zero row stays zero. Rejects
/// non-finite values, naming the row and column.
fn normalise_rows(values: &[f32], dim: usize) -> Result<Vec<f32>> {
    let mut out = Vec::with_capacity(values.len());
    for (r, row) in values.chunks_exact(dim).enumerate() {
        if let Some(c) = row.iter().position(|x| !x.is_finite()) {
            return Err(Error::invalid(format!(
                "vectors[{r}, {c}] is {}; vectors must be finite",
                row[c]
            )));
        }
        let norm = row.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
        if norm > 0.0 {
            out.extend(row.iter().map(|&x| (f64::from(x) / norm) as f32));
        } else {
            out.extend_from_slice(row);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topk::top_k;

    /// Deterministic pseudo-random values in [-1, 1).
    fn noise(seed: u64, len: usize) -> Vec<f32> {
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    /// Rows clustered tightly around three centres, so many scores are near-ties that int8
    /// and bf16 cannot separate.
    fn clustered(seed: u64, rows: usize, dim: usize) -> Vec<f32> {
        let centres = noise(seed, 3 * dim);
        let jitter = noise(seed + 1, rows * dim);
        (0..rows * dim).map(|i| centres[(i / dim % 3) * dim + i % dim] + jitter[i] * 1e-3).collect()
    }

    fn build(dir: &Path, name: &str, vectors: &[f32], dim: usize, dtype: Dtype) -> Index {
        let path = dir.join(name);
        let options = BuildOptions { dtype, model_id: "t", ids: None, masks: &[], mask_words: 0 };
        Index::build(&path, vectors, dim, &options).unwrap();
        Index::open(&path, OpenOptions::default(), 1).unwrap()
    }

    #[test]
    fn every_dtype_and_thread_split_returns_the_exact_top_k() {
        let dir = tempfile::tempdir().unwrap();
        for (trial, (rows, dim)) in [(1, 1), (65, 7), (700, 97), (3000, 16)].into_iter().enumerate()
        {
            let vectors = clustered(trial as u64, rows, dim);
            let f32_index = build(dir.path(), "f", &vectors, dim, Dtype::F32);
            let query = noise(99 + trial as u64, dim);
            let normalised = normalise_rows(&query, dim).unwrap();
            let exact: Vec<f32> =
                (0..rows as u32).map(|row| f32_index.exact_score(&normalised, row)).collect();
            for dtype in Dtype::ALL {
                let index = build(dir.path(), dtype.name(), &vectors, dim, dtype);
                for threads in [1, 3] {
                    let index = Index {
                        file: MatrixFile::open(index.path(), OpenOptions::default()).unwrap(),
                        threads,
                    };
                    let gate = index.gate(&[], None, None).unwrap();
                    for (k, threshold) in
                        [(1, None), (10, None), (rows + 1, None), (usize::MAX, Some(0.2))]
                    {
                        let got = index.search(&query, k, threshold, &gate).unwrap().hits;
                        let want = top_k(&exact, k, threshold, |_| true);
                        let got: Vec<(u32, f32)> = got.iter().map(|h| (h.row, h.score)).collect();
                        assert_eq!(got, want, "{dtype:?} rows={rows} k={k} threads={threads}");
                    }
                }
            }
        }
    }

    #[test]
    fn scores_at_chosen_rows_are_the_scan_scores_bitwise() {
        let dir = tempfile::tempdir().unwrap();
        let (rows, dim) = (700, 97);
        let vectors = noise(3, rows * dim);
        let queries = noise(4, 3 * dim);
        let chosen = [699, 0, 350, 350, 1];
        for dtype in Dtype::ALL {
            let index = build(dir.path(), dtype.name(), &vectors, dim, dtype);
            let got = index.scores_at(&queries, &chosen).unwrap();
            for (q, query) in queries.chunks(dim).enumerate() {
                let all = index.scores(query).unwrap();
                let want: Vec<f32> = chosen.iter().map(|&row| all[row as usize]).collect();
                assert_eq!(&got[q * chosen.len()..(q + 1) * chosen.len()], &want[..], "{dtype:?}");
            }
            assert!(index.scores_at(&queries, &[]).unwrap().is_empty());
            let err = index.scores_at(&queries, &[700]).unwrap_err().to_string();
            assert!(err.contains("row 700 is out of range"), "{err}");
        }
    }

    #[test]
    fn gated_rows_are_counted_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (rows, dim) = (200, 8);
        let vectors = noise(5, rows * dim);
        let masks: Vec<u64> = (0..rows as u64).flat_map(|r| [r % 2, 0]).collect();
        let path = dir.path().join("g");
        let options = BuildOptions {
            dtype: Dtype::Int8,
            model_id: "",
            ids: None,
            masks: &masks,
            mask_words: 2,
        };
        Index::build(&path, &vectors, dim, &options).unwrap();
        let index = Index::open(&path, OpenOptions::default(), 1).unwrap();
        let deny: Vec<u32> = (0..10).collect();
        let gate = index.gate(&[], None, Some(&deny)).unwrap();
        let result = index.search(&vectors[..dim], 5, None, &gate).unwrap();
        assert!(result.hits.iter().all(|hit| hit.row % 2 == 0 && hit.row >= 10));
        assert_eq!(result.n_out_of_scope, 10);
        assert_eq!(result.n_gated, 95);
        assert_eq!(result.gated.len(), GATED_REPORT_LEN);
        assert!(result.gated.iter().all(|g| g.row % 2 == 1 && g.missing_flags == [0]));
        let open_gate = index.gate(&[0], None, None).unwrap();
        assert_eq!(index.search(&vectors[..dim], 1, None, &open_gate).unwrap().hits[0].row, 0);
    }

    /// A small fuzz campaign (the larger one is `tests/fuzz`): every truncation and one bit
    /// flip per byte, with the header checksum sealed again so the checks behind it are reached;
    /// each file is refused or searched, never a panic.
    #[test]
    fn mutated_files_are_refused_or_searched_without_panicking() {
        // In memory where there is tmpfs: a write per case costs milliseconds on a disk.
        let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap();
        let path = dir.path().join("m");
        let masks: Vec<u64> = (0..40u64).flat_map(|r| [r % 3, 0]).collect();
        let options = BuildOptions {
            dtype: Dtype::Int8,
            model_id: "m",
            ids: None,
            masks: &masks,
            mask_words: 2,
        };
        Index::build(&path, &noise(9, 40 * 5), 5, &options).unwrap();
        let good = std::fs::read(&path).unwrap();
        let reseal = |bytes: &mut Vec<u8>| {
            if bytes.len() >= 128 {
                bytes[108..112].fill(0);
                let crc = crc32fast::hash(&bytes[..128]);
                bytes[108..112].copy_from_slice(&crc.to_le_bytes());
            }
        };
        let mut cases: Vec<Vec<u8>> = (0..good.len()).map(|n| good[..n].to_vec()).collect();
        for at in 0..good.len() {
            let mut flipped = good.clone();
            flipped[at] ^= 1 << (at % 8);
            reseal(&mut flipped);
            cases.push(flipped);
        }
        let (mut opened, query) = (0, noise(10, 5));
        for bytes in &cases {
            std::fs::write(&path, bytes).unwrap();
            let Ok(index) =
                Index::open(&path, OpenOptions { verify: false, expected_dim: None }, 1)
            else {
                continue;
            };
            opened += 1;
            let gate = index.gate(&[0, 1], None, None).unwrap();
            let _ = index.search(&query, 3, Some(0.0), &gate);
            let _ = index.scores_at(&query, &[0, 39]);
        }
        assert!(opened > 0 && opened < cases.len(), "{opened} of {} opened", cases.len());
    }

    #[test]
    fn bad_queries_are_invalid_arguments() {
        let dir = tempfile::tempdir().unwrap();
        let index = build(dir.path(), "i", &noise(1, 40), 4, Dtype::F32);
        let gate = index.gate(&[], None, None).unwrap();
        let err = |query: &[f32], k| index.search(query, k, None, &gate).unwrap_err().to_string();
        assert!(err(&[1.0, f32::NAN, 0.0, 0.0], 1).contains("NaN at position 1"));
        assert!(err(&[1.0, 0.0, f32::INFINITY, 0.0], 1).contains("inf at position 2"));
        assert!(err(&[1.0; 3], 1).contains("dimension 4"));
        assert!(err(&[1.0; 4], 0).contains("k must be"));
        let other = build(dir.path(), "j", &noise(1, 8), 4, Dtype::F32);
        let foreign_gate = other.gate(&[], None, None).unwrap();
        assert!(index.search(&[1.0; 4], 1, None, &foreign_gate).is_err());
    }
}
