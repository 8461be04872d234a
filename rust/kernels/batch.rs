//! Several queries against one matrix, reading each block of rows from memory once.
//!
//! The rows are cut into blocks small enough to stay in the core's L2 cache, and every query
//! scores a block before the next block is touched, so main memory sees the matrix once per
//! batch instead of once per query. Within a block the x86 kernels work in tiles of several
//! queries x several rows, so each row load from L2 also feeds several queries. Batch scores
//! are bitwise equal to single-query scores on every instruction set.

use std::ops::Range;

use super::{active, serial, Isa};

#[cfg(target_arch = "aarch64")]
use super::neon;
#[cfg(target_arch = "x86_64")]
use super::{avx2, avx512, avx512_vnni};

/// Bytes of rows scored by every query before moving on: well inside the 1-2 MiB L2 of
/// current x86 and aarch64 server cores (and the 256 KiB of older ones), large enough that
/// the per-block loop overhead is noise.
const BLOCK_BYTES: usize = 192 * 1024;

/// `out[q * n_rows + i] = dot(query q, row i)` for f32 rows; `queries` holds `n_queries`
/// queries of equal dimension back to back and `out` is `n_queries x n_rows`, row-major.
///
/// # Panics
/// If `queries` or `out` do not split into `n_queries` equal parts, or on the shapes
/// [`super::scan_f32`] rejects.
pub fn scan_f32_batch(
    queries: &[f32],
    n_queries: usize,
    rows: &[f32],
    stride: usize,
    out: &mut [f32],
) {
    dispatch!(
        active();
        scan_f32_batch_serial,
        avx512::scan_f32_batch_avx512,
        avx2::scan_f32_batch_avx2,
        neon::scan_f32_batch_neon,
        (queries, n_queries, rows, stride, out)
    );
}

/// [`scan_f32_batch`] for int8 rows with one scale per row (`scales.len() == n_rows`).
///
/// # Panics
/// As [`scan_f32_batch`], and if `scales` does not hold one scale per row.
pub fn scan_i8_batch(
    queries: &[f32],
    n_queries: usize,
    rows: &[i8],
    stride: usize,
    scales: &[f32],
    out: &mut [f32],
) {
    scan_i8_batch_on(active(), queries, n_queries, rows, stride, scales, out);
}

/// [`scan_i8_batch`] on instruction set `isa`; tests compare every path through it.
///
/// # Panics
/// If the CPU lacks `isa`, as well as where the dispatching entry point panics.
pub(crate) fn scan_i8_batch_on(
    isa: Isa,
    queries: &[f32],
    n_queries: usize,
    rows: &[i8],
    stride: usize,
    scales: &[f32],
    out: &mut [f32],
) {
    if n_queries > 0 {
        assert_eq!(scales.len() * n_queries, out.len(), "one scale per row");
    }
    assert!(isa.is_available(), "instruction set {} is not available", isa.name());
    dispatch!(
        isa;
        scan_i8_batch_serial,
        vnni: avx512_vnni::scan_i8_batch_avx512_vnni,
        avx512::scan_i8_batch_avx512,
        avx2::scan_i8_batch_avx2,
        neon::scan_i8_batch_neon,
        (queries, n_queries, rows, stride, scales, out)
    );
}

/// [`scan_f32_batch`] for bf16 rows (raw `u16` bits).
///
/// # Panics
/// As [`scan_f32_batch`].
pub fn scan_bf16_batch(
    queries: &[f32],
    n_queries: usize,
    rows: &[u16],
    stride: usize,
    out: &mut [f32],
) {
    dispatch!(
        active();
        scan_bf16_batch_serial,
        avx512::scan_bf16_batch_avx512,
        avx2::scan_bf16_batch_avx2,
        neon::scan_bf16_batch_neon,
        (queries, n_queries, rows, stride, out)
    );
}

/// Dimension and row count of a batch.
#[derive(Clone, Copy)]
pub(crate) struct BatchShape {
    pub dim: usize,
    pub n_rows: usize,
}

/// The shape of a batch of `n_queries` queries filling `queries_len` floats and `out_len`
/// scores; `None` for an empty batch.
///
/// # Panics
/// If the buffers do not split into `n_queries` equal non-empty parts.
pub(crate) fn batch_shape(
    queries_len: usize,
    n_queries: usize,
    out_len: usize,
) -> Option<BatchShape> {
    if n_queries == 0 {
        assert!(queries_len == 0 && out_len == 0, "no queries but non-empty buffers");
        return None;
    }
    assert_eq!(queries_len % n_queries, 0, "queries do not split into {n_queries} queries");
    assert_eq!(out_len % n_queries, 0, "out does not split into {n_queries} score rows");
    let dim = queries_len / n_queries;
    assert!(dim > 0, "queries have dimension 0");
    Some(BatchShape { dim, n_rows: out_len / n_queries })
}

/// Consecutive ranges of rows, each about [`BLOCK_BYTES`] of storage.
pub(crate) fn row_blocks(
    n_rows: usize,
    stride: usize,
    elem_size: usize,
) -> impl Iterator<Item = Range<usize>> {
    let block_rows = (BLOCK_BYTES / (stride.max(1) * elem_size)).max(4);
    (0..n_rows).step_by(block_rows).map(move |start| start..(start + block_rows).min(n_rows))
}

/// Multiplies every query's scores (rows of `out`) by the per-row scales, the same rounding
/// step as the single-query int8 scan.
pub(crate) fn apply_scales(scales: &[f32], out: &mut [f32]) {
    if scales.is_empty() {
        assert!(out.is_empty(), "scores for rows without scales");
        return;
    }
    assert_eq!(out.len() % scales.len(), 0, "one scale per row");
    for scores in out.chunks_exact_mut(scales.len()) {
        for (score, scale) in scores.iter_mut().zip(scales) {
            *score *= scale;
        }
    }
}

/// Serial [`scan_f32_batch`]: the serial single-query kernel, block by block.
pub(super) fn scan_f32_batch_serial(
    queries: &[f32],
    n_queries: usize,
    rows: &[f32],
    stride: usize,
    out: &mut [f32],
) {
    by_query::<f32>(queries, n_queries, stride, out, |query, block, out| {
        serial::scan_f32(query, &rows[block.start * stride..], stride, out);
    });
}

/// Serial [`scan_i8_batch`].
pub(super) fn scan_i8_batch_serial(
    queries: &[f32],
    n_queries: usize,
    rows: &[i8],
    stride: usize,
    scales: &[f32],
    out: &mut [f32],
) {
    by_query::<i8>(queries, n_queries, stride, out, |query, block, out| {
        serial::scan_i8(query, &rows[block.start * stride..], stride, &scales[block], out);
    });
}

/// Serial [`scan_bf16_batch`].
pub(super) fn scan_bf16_batch_serial(
    queries: &[f32],
    n_queries: usize,
    rows: &[u16],
    stride: usize,
    out: &mut [f32],
) {
    by_query::<u16>(queries, n_queries, stride, out, |query, block, out| {
        serial::scan_bf16(query, &rows[block.start * stride..], stride, out);
    });
}

/// Calls `score(query, block, out)` for every block of rows and, within a block, every query,
/// where `out` is the query's slice of scores for the rows in `block`.
fn by_query<T>(
    queries: &[f32],
    n_queries: usize,
    stride: usize,
    out: &mut [f32],
    mut score: impl FnMut(&[f32], Range<usize>, &mut [f32]),
) {
    let Some(BatchShape { dim, n_rows }) = batch_shape(queries.len(), n_queries, out.len()) else {
        return;
    };
    let queries: Vec<&[f32]> = queries.chunks_exact(dim).collect();
    blockwise(&queries, n_rows, stride, size_of::<T>(), out, |query, block, out| {
        score(query, block, out);
    });
}

/// Calls `score(query, block, out)` for every block of about [`BLOCK_BYTES`] of rows (elements
/// of `elem_size` bytes) and, within a block, every query, where `out` is the query's slice of
/// scores (`out` holds `queries.len()` runs of `n_rows`) for the rows in `block`.
fn blockwise<P>(
    queries: &[P],
    n_rows: usize,
    stride: usize,
    elem_size: usize,
    out: &mut [f32],
    mut score: impl FnMut(&P, Range<usize>, &mut [f32]),
) {
    for block in row_blocks(n_rows, stride, elem_size) {
        for (query, scores) in queries.iter().zip(out.chunks_exact_mut(n_rows)) {
            score(query, block.clone(), &mut scores[block.clone()]);
        }
    }
}
