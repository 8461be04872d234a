//! AVX-512 VNNI int8 kernels (x86_64): `vpdpbusd`, 64 byte products per instruction.
//!
//! `vpdpbusd` multiplies unsigned bytes by signed bytes and adds each group of four products
//! into an i32 lane. Neither side of our dot product fits it as stored: the rows are signed
//! int8 and the query is i16 (see `query_i16`). Both are rewritten exactly:
//!
//! * each row byte `r` becomes `r + 128` (one `vpxord` with 0x80 per 64 bytes), unsigned;
//! * each query value `Q` is split into two signed bytes, `Q = 256 h + l` with `l` the low
//!   byte taken as signed (`l = ((Q + 128) mod 256) - 128`) and `h = (Q - l) / 256`.
//!
//! Then `sum Q r = 256 sum h (r + 128) + sum l (r + 128) - 128 (256 sum h + sum l)`, two
//! `vpdpbusd` per 64 columns and a per-query constant, with no row-dependent correction. The
//! integer sum is exact, so the scores are bitwise those of the AVX-512 integer kernel, and
//! the scan of 10,000 x 384 rows runs about 1.3x faster than its `vpmovsxbw` + `vpmaddwd`
//! (`benches/bench_kernels.py`, AMD EPYC with AVX-512).
//! The two planes are combined lane by lane (`256 h + l`) before the one horizontal sum per
//! row; see `LANE_FITS_I32` for why that cannot overflow.

use std::arch::x86_64::{
    __m512i, _mm512_add_epi32, _mm512_dpbusd_epi32, _mm512_loadu_si512, _mm512_set1_epi8,
    _mm512_setzero_si512, _mm512_slli_epi32, _mm512_xor_si512,
};

use super::avx512::{self, reduce_add_i32_as_i64};
use super::batch::{apply_scales, batch_shape, blockwise, BatchShape};
use super::query_i16::{QueryI16, INTEGER_MAX_DIM};
use super::{check_scan, row, rows_from, GROUP_ROWS};

/// int8 columns per `vpdpbusd`.
const STEP: usize = 64;

/// Each step adds at most `4 * 255 * 128` to a lane of either plane (row bytes after the flip
/// are 0..=255, query bytes -128..=127), so a lane of `256 h + l` stays within
/// `steps * 4 * 255 * 128 * 257`: below 2^31 up to 64 steps, which is `INTEGER_MAX_DIM`.
const LANE_FITS_I32: () =
    assert!(INTEGER_MAX_DIM.div_ceil(STEP) as i64 * 4 * 255 * 128 * 257 <= i32::MAX as i64);

/// Whether the running CPU has what this file relies on: the AVX-512 kernels' features plus
/// AVX512-VNNI.
pub fn is_supported() -> bool {
    avx512::is_supported() && is_x86_feature_detected!("avx512vnni")
}

/// The i16 query as two signed byte planes, zero-padded to a whole number of steps.
struct QueryBytes {
    /// `h` of `Q = 256 h + l`.
    high: Vec<i8>,
    /// `l` of `Q = 256 h + l`.
    low: Vec<i8>,
    /// `128 * sum Q`: what adding 128 to every row byte adds to the dot product.
    offset: i64,
    /// As `QueryI16::scale`.
    scale: f32,
}

impl QueryBytes {
    fn new(query: &[f32]) -> Self {
        let rounded = QueryI16::new(query, STEP);
        let (high, low) = rounded.values.iter().map(|&q| split(q)).unzip();
        let offset = 128 * rounded.values.iter().map(|&q| i64::from(q)).sum::<i64>();
        Self { high, low, offset, scale: rounded.scale }
    }

    /// The 64 high and low bytes from column `col`.
    ///
    /// # Panics
    /// If the planes end before `col + 64`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn planes(&self, col: usize) -> (__m512i, __m512i) {
        let (high, low) = (&self.high[col..col + STEP], &self.low[col..col + STEP]);
        // SAFETY: both slices hold exactly 64 bytes.
        unsafe {
            (_mm512_loadu_si512(high.as_ptr().cast()), _mm512_loadu_si512(low.as_ptr().cast()))
        }
    }
}

/// `(h, l)` with `q = 256 h + l`, both signed bytes. Exists for `-32896 <= q <= 32639`, which
/// is why `QUERY_I16_MAX` is 32639.
fn split(q: i16) -> (i8, i8) {
    let low = q as i8; // the low byte, reinterpreted as signed
    let high = (i32::from(q) - i32::from(low)) / 256;
    (i8::try_from(high).expect("query value outside the byte-split range"), low)
}

/// Adds the products of 64 signed row bytes `x` with the query planes `(high, low)` to the two
/// accumulators, after flipping `x` to unsigned.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
fn multiply_add(
    acc_high: __m512i,
    acc_low: __m512i,
    x: __m512i,
    (high, low): (__m512i, __m512i),
) -> (__m512i, __m512i) {
    let unsigned = _mm512_xor_si512(x, _mm512_set1_epi8(i8::MIN));
    (_mm512_dpbusd_epi32(acc_high, unsigned, high), _mm512_dpbusd_epi32(acc_low, unsigned, low))
}

/// Exact integer dot products of the query with `R` int8 rows of `dim` elements.
///
/// No prefetch hints, unlike the other x86 kernels: at N = 10,000 (an L3-resident matrix) the
/// scan ran 5-10% faster without them; at this density of work per byte the hardware
/// prefetcher keeps up on its own.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[inline]
fn dot_rows<const R: usize>(query: &QueryBytes, rows: [&[i8]; R]) -> [i64; R] {
    let dim = rows[0].len();
    assert!(rows.iter().all(|r| r.len() == dim) && query.low.len() >= dim.next_multiple_of(STEP));
    let () = LANE_FITS_I32;
    let mut acc_high = [_mm512_setzero_si512(); R];
    let mut acc_low = [_mm512_setzero_si512(); R];
    let mut col = 0;
    while col + STEP <= dim {
        let planes = query.planes(col);
        for r in 0..R {
            // SAFETY: `col + 64 <= dim` and every row holds `dim` elements.
            let x = unsafe { _mm512_loadu_si512(rows[r][col..].as_ptr().cast()) };
            (acc_high[r], acc_low[r]) = multiply_add(acc_high[r], acc_low[r], x, planes);
        }
        col += STEP;
    }
    if col < dim {
        let planes = query.planes(col);
        for r in 0..R {
            // The last partial step goes through a zeroed buffer. Its padding becomes 128 in
            // `multiply_add`, but meets the query's zero padding, so it adds nothing.
            let mut padded = [0i8; STEP];
            padded[..dim - col].copy_from_slice(&rows[r][col..]);
            // SAFETY: `padded` holds 64 bytes.
            let x = unsafe { _mm512_loadu_si512(padded.as_ptr().cast()) };
            (acc_high[r], acc_low[r]) = multiply_add(acc_high[r], acc_low[r], x, planes);
        }
    }
    let mut sums = [0; R];
    for r in 0..R {
        // One lane reduction per row rather than one per plane: `256 h + l` per lane first,
        // which `LANE_FITS_I32` shows cannot overflow.
        let lanes = _mm512_add_epi32(_mm512_slli_epi32::<8>(acc_high[r]), acc_low[r]);
        sums[r] = reduce_add_i32_as_i64(lanes) - query.offset;
    }
    sums
}

/// `out[i] = dot(query, row i)` for int8 rows (scales not applied), [`GROUP_ROWS`] rows at a
/// time.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn scan_rows(query: &QueryBytes, dim: usize, rows: &[i8], stride: usize, out: &mut [f32]) {
    check_scan(dim, rows.len(), stride, out.len());
    let mut groups = out.chunks_exact_mut(GROUP_ROWS);
    let mut first = 0;
    for group in &mut groups {
        let group_rows = rows_from(rows, first, stride, dim);
        let dots = dot_rows::<GROUP_ROWS>(query, group_rows);
        for (out, dot) in group.iter_mut().zip(dots) {
            // The same two roundings as the AVX-512 integer kernel, so the same scores.
            *out = dot as f32 * query.scale;
        }
        first += GROUP_ROWS;
    }
    for (i, out) in groups.into_remainder().iter_mut().enumerate() {
        *out = dot_rows::<1>(query, [row(rows, first + i, stride, dim)])[0] as f32 * query.scale;
    }
}

/// AVX-512 VNNI [`super::scan_i8`].
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW and AVX512-VNNI ([`is_supported`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub fn scan_i8_avx512_vnni(
    query: &[f32],
    rows: &[i8],
    stride: usize,
    scales: &[f32],
    out: &mut [f32],
) {
    if query.len() > INTEGER_MAX_DIM {
        // Safe to call: this function's features include the AVX-512 kernel's.
        return avx512::scan_i8_avx512(query, rows, stride, scales, out);
    }
    assert_eq!(scales.len(), out.len(), "one scale per row");
    scan_rows(&QueryBytes::new(query), query.len(), rows, stride, out);
    apply_scales(scales, out);
}

/// AVX-512 VNNI [`super::scan_i8_batch`].
///
/// # Safety
/// The CPU must support AVX-512F, AVX-512BW and AVX512-VNNI ([`is_supported`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub fn scan_i8_batch_avx512_vnni(
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
        // Safe to call: this function's features include the AVX-512 kernel's.
        return avx512::scan_i8_batch_avx512(queries, n_queries, rows, stride, scales, out);
    }
    let queries: Vec<_> = queries.chunks_exact(dim).map(QueryBytes::new).collect();
    blockwise(&queries, n_rows, stride, 1, out, |query, block, scores| {
        scan_rows(query, dim, &rows[block.start * stride..], stride, scores);
    });
    apply_scales(scales, out);
}
