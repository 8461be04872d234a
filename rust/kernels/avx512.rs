//! AVX-512 kernels (x86_64), 16 f32 lanes per register.
//!
//! Relies on AVX-512F and AVX-512BW: `vfmadd231ps zmm` for the f32 products, `vmovups`
//! (masked for the f32 tail), `vpmovzxwd` + `vpslld 16` to widen bf16 exactly, `vaddps` for
//! the read probe. int8 rows take the integer path: `vpmovsxbw` widens 32 row bytes to i16,
//! `vpmaddwd` multiplies them by the i16-rounded query and adds pairs into i32 lanes exactly,
//! `vpaddd` accumulates, `vpmovsxdq` widens the lanes to i64 for the final sum. Queries longer
//! than `INTEGER_MAX_DIM` fall back to `vpmovsxbd` + `vcvtdq2ps` + `vfmadd231ps`.
//!
//! A single f32 query of up to 384 dimensions stays in registers for the whole scan, and the
//! rows are read strictly in order with no prefetch hints ([`scan_resident`]). Otherwise four
//! rows share each query load and each row keeps two accumulators, so eight independent FMA
//! chains hide the FMA latency; `prefetcht0` hints fetch the rows two groups ahead. Batches
//! work in tiles of 4 queries x 2 rows, so every row load from L2 feeds four queries.

use std::arch::x86_64::{
    __m512, __m512i, _mm256_loadu_si256, _mm512_add_epi32, _mm512_add_epi64, _mm512_add_ps,
    _mm512_castsi512_ps, _mm512_castsi512_si256, _mm512_cvtepi32_epi64, _mm512_cvtepi32_ps,
    _mm512_cvtepi8_epi16, _mm512_cvtepi8_epi32, _mm512_cvtepu16_epi32, _mm512_extracti64x4_epi64,
    _mm512_fmadd_ps, _mm512_loadu_epi16, _mm512_loadu_ps, _mm512_madd_epi16, _mm512_maskz_loadu_ps,
    _mm512_reduce_add_epi64, _mm512_reduce_add_ps, _mm512_setzero_ps, _mm512_setzero_si512,
    _mm512_slli_epi32, _mm_loadu_si128,
};

use super::batch::{apply_scales, batch_shape, blockwise, row_blocks, BatchShape};
use super::query_i16::{QueryI16, INTEGER_MAX_DIM};
use super::{check_scan, prefetch, row, rows_from, GROUP_ROWS, PREFETCH_ROWS};

const LANES: usize = 16;

/// Queries per batch tile: 4 queries x 2 rows x 2 accumulators + 8 query registers + 2 row
/// registers = 26 of the 32 zmm registers.
const QUERY_TILE: usize = 4;

/// Rows per batch tile.
const ROW_TILE: usize = 2;

/// Whether the running CPU has what this file relies on.
pub fn is_supported() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
}

/// A storage type whose elements widen exactly to f32, 16 at a time.
trait Lanes: Copy {
    /// Loads the 16 elements at `ptr` as f32.
    ///
    /// # Safety
    /// `ptr..ptr + 16` must be readable, and the caller must run with AVX-512F enabled.
    unsafe fn load(ptr: *const Self) -> __m512;

    /// Loads `tail` (at most 16 elements) as f32, zero-filling the missing lanes.
    ///
    /// # Safety
    /// The caller must run with AVX-512F enabled.
    unsafe fn load_tail(tail: &[Self]) -> __m512;
}

impl Lanes for f32 {
    #[inline(always)]
    unsafe fn load(ptr: *const f32) -> __m512 {
        // SAFETY: forwarded from the caller's contract.
        unsafe { _mm512_loadu_ps(ptr) }
    }

    #[inline(always)]
    unsafe fn load_tail(tail: &[f32]) -> __m512 {
        debug_assert!(tail.len() <= LANES);
        // Computed in u32 so that a full 16-element tail does not overflow the shift.
        let mask = ((1u32 << tail.len()) - 1) as u16;
        // SAFETY: masked-off lanes are never touched, so only `tail`'s elements are read.
        unsafe { _mm512_maskz_loadu_ps(mask, tail.as_ptr()) }
    }
}

impl Lanes for i8 {
    #[inline(always)]
    unsafe fn load(ptr: *const i8) -> __m512 {
        // SAFETY: reads exactly 16 bytes, readable by the caller's contract.
        unsafe { _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(ptr.cast()))) }
    }

    #[inline(always)]
    unsafe fn load_tail(tail: &[i8]) -> __m512 {
        let mut padded = [0i8; LANES];
        padded[..tail.len()].copy_from_slice(tail);
        // SAFETY: `padded` holds 16 elements.
        unsafe { Self::load(padded.as_ptr()) }
    }
}

impl Lanes for u16 {
    #[inline(always)]
    unsafe fn load(ptr: *const u16) -> __m512 {
        // SAFETY: reads exactly 32 bytes, readable by the caller's contract. bf16 is the top
        // half of an f32, so zero-extending and shifting left by 16 is the exact conversion.
        unsafe {
            let wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(ptr.cast()));
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(wide))
        }
    }

    #[inline(always)]
    unsafe fn load_tail(tail: &[u16]) -> __m512 {
        let mut padded = [0u16; LANES];
        padded[..tail.len()].copy_from_slice(tail);
        // SAFETY: `padded` holds 16 elements.
        unsafe { Self::load(padded.as_ptr()) }
    }
}

/// Dot products of `Q` queries with `R` rows, all exactly as long as the queries: every row
/// load feeds all the queries. Each (query, row) pair accumulates even 16-column chunks in one
/// register and odd chunks in another whatever `Q` and `R` are, so a score is bitwise the same
/// in every tile shape. Prefetches the same columns `ahead` elements after each row (none when
/// `ahead` is 0).
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn dot_tile<T: Lanes, const Q: usize, const R: usize>(
    queries: [&[f32]; Q],
    rows: [&[T]; R],
    ahead: usize,
) -> [[f32; R]; Q] {
    let dim = queries[0].len();
    assert!(queries.iter().all(|q| q.len() == dim) && rows.iter().all(|r| r.len() == dim));
    let mut acc_a = [[_mm512_setzero_ps(); R]; Q];
    let mut acc_b = [[_mm512_setzero_ps(); R]; Q];
    let mut col = 0;
    while col + 2 * LANES <= dim {
        // SAFETY: `col + 32 <= dim` and every query and row holds `dim` elements.
        unsafe {
            let mut q_a = [_mm512_setzero_ps(); Q];
            let mut q_b = [_mm512_setzero_ps(); Q];
            for k in 0..Q {
                q_a[k] = _mm512_loadu_ps(queries[k].as_ptr().add(col));
                q_b[k] = _mm512_loadu_ps(queries[k].as_ptr().add(col + LANES));
            }
            for r in 0..R {
                let ptr = rows[r].as_ptr().add(col);
                if ahead > 0 {
                    prefetch(ptr.wrapping_add(ahead), 2 * LANES);
                }
                let (x_a, x_b) = (T::load(ptr), T::load(ptr.add(LANES)));
                for k in 0..Q {
                    acc_a[k][r] = _mm512_fmadd_ps(x_a, q_a[k], acc_a[k][r]);
                    acc_b[k][r] = _mm512_fmadd_ps(x_b, q_b[k], acc_b[k][r]);
                }
            }
        }
        col += 2 * LANES;
    }
    if col + LANES <= dim {
        // SAFETY: `col + 16 <= dim`, as above.
        unsafe {
            for r in 0..R {
                let x = T::load(rows[r].as_ptr().add(col));
                for k in 0..Q {
                    let q = _mm512_loadu_ps(queries[k].as_ptr().add(col));
                    acc_a[k][r] = _mm512_fmadd_ps(x, q, acc_a[k][r]);
                }
            }
        }
        col += LANES;
    }
    if col < dim {
        // SAFETY: AVX-512F is enabled in this function; the tails are in-bounds slices.
        unsafe {
            for r in 0..R {
                let x = T::load_tail(&rows[r][col..]);
                for k in 0..Q {
                    let q = f32::load_tail(&queries[k][col..]);
                    acc_b[k][r] = _mm512_fmadd_ps(x, q, acc_b[k][r]);
                }
            }
        }
    }
    let mut sums = [[0.0; R]; Q];
    for k in 0..Q {
        for r in 0..R {
            sums[k][r] = _mm512_reduce_add_ps(_mm512_add_ps(acc_a[k][r], acc_b[k][r]));
        }
    }
    sums
}

/// `out[i] = dot(query, row i)` for f32 rows: [`scan_resident`] when the query fits in
/// registers, else [`scan_rows`].
#[target_feature(enable = "avx512f,avx512bw")]
fn scan_f32_rows(query: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    macro_rules! by_chunks {
        ($($chunks:literal)*) => {
            match query.len().div_ceil(LANES) {
                $($chunks => scan_resident::<$chunks>(query, rows, stride, out),)*
                _ => scan_rows(query, rows, stride, out),
            }
        };
    }
    by_chunks!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24);
}

/// `out[i] = dot(query, row i)` for f32 rows and a query of `C` 16-lane chunks (the last may
/// be partial) held in `C` registers for the whole scan, one row at a time.
///
/// Holding the query makes each 64 bytes of a row one FMA with a memory operand, the
/// instruction count of the read probe, and reading the rows strictly in order lets the
/// hardware prefetcher stream them with no hints. [`scan_rows`] reloads the query for every
/// group of rows and needs a hint per line, twice the instructions, which costs most when a
/// sibling hyperthread competes for the core. At N = 10,000, d = 384 on Zen 5 this kernel took
/// 0.77-0.86x the time of [`scan_rows`], and 1.0-1.1x the read probe against its 1.2-1.4x.
/// bf16 rows gain nothing from it (0.98x the speed): widening them costs the instructions
/// anyway.
///
/// `C <= 24` keeps 24 query and 2 accumulator registers within the 32 zmm registers, spill-free.
/// Chunks go to the two accumulators as in [`dot_tile`], so every score is bitwise the one the
/// batch and re-scoring paths compute.
#[target_feature(enable = "avx512f,avx512bw")]
fn scan_resident<const C: usize>(query: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    let dim = query.len();
    assert!(C > 0 && dim.div_ceil(LANES) == C, "a {dim}-dimension query is not {C} chunks");
    check_scan(dim, rows.len(), stride, out.len());
    let partial_last = !dim.is_multiple_of(LANES);
    let last = (C - 1) * LANES;
    let mut held = [_mm512_setzero_ps(); C];
    for (chunk, slot) in held.iter_mut().enumerate() {
        // SAFETY: a whole chunk is read only when `dim` covers it; a partial one goes through
        // the masked tail load.
        *slot = unsafe {
            if chunk * LANES + LANES <= dim {
                _mm512_loadu_ps(query.as_ptr().add(chunk * LANES))
            } else {
                f32::load_tail(&query[chunk * LANES..])
            }
        };
    }
    for (i, score) in out.iter_mut().enumerate() {
        let row = row(rows, i, stride, dim);
        let mut acc = [_mm512_setzero_ps(); 2];
        for (chunk, &q) in held[..C - 1].iter().enumerate() {
            // SAFETY: every chunk but the last lies within the row's `dim` elements.
            let x = unsafe { _mm512_loadu_ps(row.as_ptr().add(chunk * LANES)) };
            acc[chunk % 2] = _mm512_fmadd_ps(x, q, acc[chunk % 2]);
        }
        // As in `dot_tile`: a whole last chunk keeps the alternation, a partial one goes to
        // the second accumulator.
        // SAFETY: a whole last chunk lies within the row; a partial one is a masked load.
        let (x, slot) = unsafe {
            if partial_last {
                (f32::load_tail(&row[last..]), 1)
            } else {
                (_mm512_loadu_ps(row.as_ptr().add(last)), (C - 1) % 2)
            }
        };
        acc[slot] = _mm512_fmadd_ps(x, held[C - 1], acc[slot]);
        *score = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
    }
}

/// `out[i] = dot(query, row i)`, [`GROUP_ROWS`] rows at a time.
#[target_feature(enable = "avx512f,avx512bw")]
fn scan_rows<T: Lanes>(query: &[f32], rows: &[T], stride: usize, out: &mut [f32]) {
    let dim = query.len();
    check_scan(dim, rows.len(), stride, out.len());
    let mut groups = out.chunks_exact_mut(GROUP_ROWS);
    let mut first = 0;
    for group in &mut groups {
        let group_rows = rows_from(rows, first, stride, dim);
        let [scores] = dot_tile::<T, 1, GROUP_ROWS>([query], group_rows, PREFETCH_ROWS * stride);
        group.copy_from_slice(&scores);
        first += GROUP_ROWS;
    }
    for (i, score) in groups.into_remainder().iter_mut().enumerate() {
        *score = dot_tile::<T, 1, 1>([query], [row(rows, first + i, stride, dim)], 0)[0][0];
    }
}

/// Scores of `n_queries` queries (back to back in `queries`) against every row into `out`
/// (`n_queries x n_rows`), tile by tile within each L2-sized block of rows.
#[target_feature(enable = "avx512f,avx512bw")]
fn scan_batch<T: Lanes>(
    queries: &[f32],
    n_queries: usize,
    rows: &[T],
    stride: usize,
    out: &mut [f32],
) {
    let Some(BatchShape { dim, n_rows }) = batch_shape(queries.len(), n_queries, out.len()) else {
        return;
    };
    for block in row_blocks(n_rows, stride, size_of::<T>()) {
        let block_rows = &rows[block.start * stride..];
        let block_out = &mut out[block.start..];
        scan_tiles(queries, dim, block_rows, stride, block.len(), block_out, n_rows);
    }
}

/// Query `q` against row `i < n` into `out[q * out_stride + i]`, [`QUERY_TILE`] queries x
/// [`ROW_TILE`] rows per tile; leftover queries go through the single-query path.
#[target_feature(enable = "avx512f,avx512bw")]
fn scan_tiles<T: Lanes>(
    queries: &[f32],
    dim: usize,
    rows: &[T],
    stride: usize,
    n: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let n_queries = queries.len() / dim;
    check_scan(dim, rows.len(), stride, n);
    let mut first_query = 0;
    while first_query + QUERY_TILE <= n_queries {
        let tile_queries = rows_from(queries, first_query, dim, dim);
        let mut first_row = 0;
        while first_row + ROW_TILE <= n {
            let tile_rows = rows_from(rows, first_row, stride, dim);
            let scores = dot_tile::<T, QUERY_TILE, ROW_TILE>(tile_queries, tile_rows, 0);
            for (k, scores) in scores.iter().enumerate() {
                let at = (first_query + k) * out_stride + first_row;
                out[at..at + ROW_TILE].copy_from_slice(scores);
            }
            first_row += ROW_TILE;
        }
        for i in first_row..n {
            let scores = dot_tile::<T, QUERY_TILE, 1>(tile_queries, [row(rows, i, stride, dim)], 0);
            for (k, [score]) in scores.iter().enumerate() {
                out[(first_query + k) * out_stride + i] = *score;
            }
        }
        first_query += QUERY_TILE;
    }
    for q in first_query..n_queries {
        scan_rows(
            row(queries, q, dim, dim),
            rows,
            stride,
            &mut out[q * out_stride..q * out_stride + n],
        );
    }
}

/// int8 elements per integer step: one `vpmovsxbw` of 32 bytes into 32 i16 lanes.
const I8_STEP: usize = 32;

/// Exact integer dot products of the i16 query with `R` int8 rows of `dim` elements, while
/// prefetching the same columns `ahead` elements after each row (none when `ahead` is 0).
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
fn dot_rows_i8<const R: usize>(query: &QueryI16, rows: [&[i8]; R], ahead: usize) -> [i64; R] {
    let dim = rows[0].len();
    assert!(
        rows.iter().all(|r| r.len() == dim) && query.values.len() >= dim.next_multiple_of(I8_STEP)
    );
    let mut acc = [_mm512_setzero_si512(); R];
    let mut col = 0;
    while col + I8_STEP <= dim {
        // SAFETY: `col + 32 <= dim`; every row holds `dim` elements and the query at least as
        // many (checked above).
        unsafe {
            let q = _mm512_loadu_epi16(query.values.as_ptr().add(col));
            for r in 0..R {
                let ptr = rows[r].as_ptr().add(col);
                if ahead > 0 {
                    prefetch(ptr.wrapping_add(ahead), I8_STEP);
                }
                let x = _mm512_cvtepi8_epi16(_mm256_loadu_si256(ptr.cast()));
                acc[r] = _mm512_add_epi32(acc[r], _mm512_madd_epi16(x, q));
            }
        }
        col += I8_STEP;
    }
    if col < dim {
        // SAFETY: the query is zero-padded to a whole step (checked above); the row tails go
        // through a zeroed 32-byte buffer.
        unsafe {
            let q = _mm512_loadu_epi16(query.values.as_ptr().add(col));
            for r in 0..R {
                let mut padded = [0i8; I8_STEP];
                padded[..dim - col].copy_from_slice(&rows[r][col..]);
                let x = _mm512_cvtepi8_epi16(_mm256_loadu_si256(padded.as_ptr().cast()));
                acc[r] = _mm512_add_epi32(acc[r], _mm512_madd_epi16(x, q));
            }
        }
    }
    let mut sums = [0; R];
    for r in 0..R {
        sums[r] = reduce_add_i32_as_i64(acc[r]);
    }
    sums
}

/// Sum of the 16 i32 lanes, widened to i64 first so that it cannot overflow.
#[target_feature(enable = "avx512f,avx512bw")]
#[inline]
pub(super) fn reduce_add_i32_as_i64(v: __m512i) -> i64 {
    let low = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v));
    let high = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64::<1>(v));
    _mm512_reduce_add_epi64(_mm512_add_epi64(low, high))
}

/// `out[i] = dot(query, row i)` for int8 rows through the integer path (scales not applied),
/// [`GROUP_ROWS`] rows at a time.
#[target_feature(enable = "avx512f,avx512bw")]
fn scan_rows_i8(query: &QueryI16, dim: usize, rows: &[i8], stride: usize, out: &mut [f32]) {
    check_scan(dim, rows.len(), stride, out.len());
    let mut groups = out.chunks_exact_mut(GROUP_ROWS);
    let mut first = 0;
    for group in &mut groups {
        let group_rows = rows_from(rows, first, stride, dim);
        let dots = dot_rows_i8::<GROUP_ROWS>(query, group_rows, PREFETCH_ROWS * stride);
        for (out, dot) in group.iter_mut().zip(dots) {
            // The integer sum is exact; converting and scaling it are the only roundings.
            *out = dot as f32 * query.scale;
        }
        first += GROUP_ROWS;
    }
    for (i, out) in groups.into_remainder().iter_mut().enumerate() {
        *out =
            dot_rows_i8::<1>(query, [row(rows, first + i, stride, dim)], 0)[0] as f32 * query.scale;
    }
}

/// AVX-512 [`super::dot_f32`].
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW ([`is_supported`]).
#[target_feature(enable = "avx512f,avx512bw")]
pub fn dot_f32_avx512(a: &[f32], b: &[f32]) -> f32 {
    dot_tile::<f32, 1, 1>([a], [b], 0)[0][0]
}

/// AVX-512 [`super::scan_f32`].
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW ([`is_supported`]).
#[target_feature(enable = "avx512f,avx512bw")]
pub fn scan_f32_avx512(query: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    scan_f32_rows(query, rows, stride, out);
}

/// AVX-512 [`super::scan_i8`].
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW ([`is_supported`]).
#[target_feature(enable = "avx512f,avx512bw")]
pub fn scan_i8_avx512(query: &[f32], rows: &[i8], stride: usize, scales: &[f32], out: &mut [f32]) {
    assert_eq!(scales.len(), out.len(), "one scale per row");
    if query.len() <= INTEGER_MAX_DIM {
        scan_rows_i8(&QueryI16::new(query, I8_STEP), query.len(), rows, stride, out);
    } else {
        scan_rows(query, rows, stride, out);
    }
    apply_scales(scales, out);
}

/// AVX-512 [`super::scan_bf16`].
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW ([`is_supported`]).
#[target_feature(enable = "avx512f,avx512bw")]
pub fn scan_bf16_avx512(query: &[f32], rows: &[u16], stride: usize, out: &mut [f32]) {
    scan_rows(query, rows, stride, out);
}

/// AVX-512 [`super::scan_f32_batch`].
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW ([`is_supported`]).
#[target_feature(enable = "avx512f,avx512bw")]
pub fn scan_f32_batch_avx512(
    queries: &[f32],
    n_queries: usize,
    rows: &[f32],
    stride: usize,
    out: &mut [f32],
) {
    scan_batch(queries, n_queries, rows, stride, out);
}

/// AVX-512 [`super::scan_i8_batch`].
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW ([`is_supported`]).
#[target_feature(enable = "avx512f,avx512bw")]
pub fn scan_i8_batch_avx512(
    queries: &[f32],
    n_queries: usize,
    rows: &[i8],
    stride: usize,
    scales: &[f32],
    out: &mut [f32],
) {
    let Some(BatchShape { dim, n_rows }) = batch_shape(queries.len(), n_queries, out.len()) else {
        return;
    };
    if dim > INTEGER_MAX_DIM {
        scan_batch(queries, n_queries, rows, stride, out);
    } else {
        let queries: Vec<_> =
            queries.chunks_exact(dim).map(|q| QueryI16::new(q, I8_STEP)).collect();
        blockwise(&queries, n_rows, stride, 1, out, |query, block, scores| {
            scan_rows_i8(query, dim, &rows[block.start * stride..], stride, scores);
        });
    }
    apply_scales(scales, out);
}

/// AVX-512 [`super::scan_bf16_batch`].
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW ([`is_supported`]).
#[target_feature(enable = "avx512f,avx512bw")]
pub fn scan_bf16_batch_avx512(
    queries: &[f32],
    n_queries: usize,
    rows: &[u16],
    stride: usize,
    out: &mut [f32],
) {
    scan_batch(queries, n_queries, rows, stride, out);
}

/// AVX-512 [`super::read_probe_f32`]: four independent add chains, 64 floats per iteration.
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW ([`is_supported`]).
#[target_feature(enable = "avx512f,avx512bw")]
pub fn read_probe_f32_avx512(rows: &[f32]) -> f32 {
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut blocks = rows.chunks_exact(4 * LANES);
    for block in &mut blocks {
        for (k, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `block` holds 64 elements, so lanes `16k .. 16k + 16` are in bounds.
            *acc = _mm512_add_ps(*acc, unsafe { _mm512_loadu_ps(block.as_ptr().add(k * LANES)) });
        }
    }
    for chunk in blocks.remainder().chunks(LANES) {
        // SAFETY: AVX-512F is enabled here and `chunk` holds at most 16 elements.
        acc[0] = _mm512_add_ps(acc[0], unsafe { f32::load_tail(chunk) });
    }
    let total = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    _mm512_reduce_add_ps(total)
}
