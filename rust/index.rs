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
//!
//! This module holds the argument, the types and the entry points; the work lives beside it:
//! [`build`] writes an index file, [`scan`] runs the blocked, threaded scan and the exact
//! re-scoring that finishes a search, [`collect`] keeps the candidates during a scan, and
//! [`scores`] reads scores and vectors at chosen rows without a top-k.

use std::path::Path;

use crate::error::{Error, Result};
use crate::gating::Gate;
use crate::kernels;
use crate::matrix_file::{Dtype, MatrixFile, OpenOptions};
use crate::topk::Hit;

mod build;
mod collect;
mod pool;
mod scan;
mod scores;

pub use build::BuildOptions;
use collect::ScanPlan;

/// How many of the best gated-out rows a search reports.
pub const GATED_REPORT_LEN: usize = 5;

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
        let mut results = self.search_batch(self.one_query(query)?, k, threshold, gate)?;
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

    /// `query`, when it holds exactly one query: a whole number of them where one is expected
    /// would otherwise pass [`Self::prepare_queries`] and be read as a batch, or as one query
    /// longer than a row.
    fn one_query<'q>(&self, query: &'q [f32]) -> Result<&'q [f32]> {
        if query.len() != self.dim() {
            return Err(Error::invalid(format!(
                "query has {} values, the index has dimension {}",
                query.len(),
                self.dim()
            )));
        }
        Ok(query)
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

    fn f32_row(&self, row: u32) -> &[f32] {
        let start = row as usize * self.file.stride();
        &self.file.f32_rows()[start..start + self.dim()]
    }

    fn exact_score(&self, query: &[f32], row: u32) -> f32 {
        kernels::dot_f32(query, self.f32_row(row))
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
    fn batch_scores_are_each_querys_scan_scores_bitwise() {
        let dir = tempfile::tempdir().unwrap();
        for (rows, dim, n_queries) in [(1, 7, 1), (65, 97, 3), (1001, 384, 5)] {
            let vectors = noise(5, rows * dim);
            let queries = noise(6, n_queries * dim);
            for dtype in Dtype::ALL {
                let built = build(dir.path(), dtype.name(), &vectors, dim, dtype);
                for threads in [1, 2] {
                    let file = MatrixFile::open(built.path(), OpenOptions::default()).unwrap();
                    let index = Index { file, threads };
                    let got = index.scores_batch(&queries).unwrap();
                    let want: Vec<f32> =
                        queries.chunks(dim).flat_map(|q| index.scores(q).unwrap()).collect();
                    assert_eq!(got, want, "{dtype:?} rows={rows} threads={threads}");
                }
                let err = built.scores_batch(&queries[1..]).unwrap_err().to_string();
                assert!(err.contains("the index has dimension"), "{err}");
            }
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

    #[test]
    fn one_query_is_exactly_dim_values() {
        // Two or five queries' worth of values where one query is expected: read as a batch,
        // they ranked by the last query, scored by the first, or overran the row stride.
        let dir = tempfile::tempdir().unwrap();
        for dtype in Dtype::ALL {
            let index = build(dir.path(), dtype.name(), &noise(1, 40), 4, dtype);
            let gate = index.gate(&[], None, None).unwrap();
            for values in [8, 20] {
                let query = noise(2, values);
                let want = format!("query has {values} values, the index has dimension 4");
                let search = index.search(&query, 3, None, &gate).unwrap_err().to_string();
                assert!(search.contains(&want), "{dtype:?}: {search}");
                let scores = index.scores(&query).unwrap_err().to_string();
                assert!(scores.contains(&want), "{dtype:?}: {scores}");
                let rescore = index.rescore(&query, &[0]).unwrap_err().to_string();
                assert!(rescore.contains(&want), "{dtype:?}: {rescore}");
            }
        }
    }
}
