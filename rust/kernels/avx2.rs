//! AVX2 + FMA kernels (x86_64), 8 f32 lanes per register: `Simd` and `IntegerDot` for these
//! instructions, under the loops of `generic`.
//!
//! Relies on AVX2 and FMA: `vfmadd231ps ymm` for the f32 products, `vmovups` loads,
//! `vpmovzxwd` + `vpslld 16` to widen bf16 exactly, and `vaddps` for the read probe. int8 rows
//! take the integer path: `vpmovsxbw` widens 16 row bytes to i16, `vpmaddwd` multiplies them by
//! the i16-rounded query and adds pairs into i32 lanes exactly, `vpaddd` accumulates and
//! `vpmovsxdq` widens the lanes to i64 for the final sum; queries longer than
//! `INTEGER_MAX_DIM` fall back to `vpmovsxbd` + `vcvtdq2ps` + `vfmadd231ps`. Tails shorter than
//! a register go through a zeroed stack buffer.
//!
//! Four rows share each query load and each row keeps two accumulators: eight FMA chains to
//! hide latency, twelve of the sixteen ymm registers in use; `prefetcht0` hints fetch the rows
//! two groups ahead. Batches work in tiles of 2 queries x 2 rows.

use std::arch::x86_64::{
    __m256, __m256i, _mm256_add_epi32, _mm256_add_epi64, _mm256_add_ps, _mm256_castps256_ps128,
    _mm256_castsi256_ps, _mm256_castsi256_si128, _mm256_cvtepi32_epi64, _mm256_cvtepi32_ps,
    _mm256_cvtepi8_epi16, _mm256_cvtepi8_epi32, _mm256_cvtepu16_epi32, _mm256_extractf128_ps,
    _mm256_extracti128_si256, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_loadu_si256,
    _mm256_madd_epi16, _mm256_setzero_ps, _mm256_setzero_si256, _mm256_slli_epi32,
    _mm256_storeu_si256, _mm_add_ps, _mm_add_ss, _mm_cvtss_f32, _mm_loadl_epi64, _mm_loadu_si128,
    _mm_movehl_ps, _mm_shuffle_ps,
};

use super::generic::integer::{self, IntegerDot};
use super::generic::{self, padded, Element, Simd, Tail};
use super::query_i16::QueryI16;
use super::{prefetch, PREFETCH_ROWS};

/// Queries per batch tile: 2 queries x 2 rows x 2 accumulators + 4 query registers + 2 row
/// registers = 14 of the 16 ymm registers.
const QUERY_TILE: usize = 2;

/// Rows per batch tile.
const ROW_TILE: usize = 2;

/// Whether the running CPU has what this file relies on.
pub fn is_supported() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

/// Proof that the running CPU has AVX2 and FMA: only code compiled with both can make one.
#[derive(Clone, Copy)]
struct Avx2(());

impl Avx2 {
    #[target_feature(enable = "avx2,fma")]
    fn new() -> Self {
        Self(())
    }
}

impl Simd for Avx2 {
    type F32 = __m256;
    const LANES: usize = 8;
    const TAIL: Tail = Tail::ByRegister;
    const PREFETCH_ROWS: usize = PREFETCH_ROWS;

    #[inline(always)]
    fn prefetch<T>(self, ptr: *const T, count: usize) {
        prefetch(ptr, count);
    }

    #[inline(always)]
    fn zero(self) -> __m256 {
        // SAFETY: an `Avx2` proves AVX2 and FMA.
        unsafe { _mm256_setzero_ps() }
    }

    #[inline(always)]
    fn add(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: an `Avx2` proves AVX2 and FMA.
        unsafe { _mm256_add_ps(a, b) }
    }

    #[inline(always)]
    fn mul_add(self, acc: __m256, x: __m256, q: __m256) -> __m256 {
        // SAFETY: an `Avx2` proves AVX2 and FMA.
        unsafe { _mm256_fmadd_ps(x, q, acc) }
    }

    #[inline(always)]
    fn sum(self, v: __m256) -> f32 {
        // SAFETY: an `Avx2` proves AVX2 and FMA.
        unsafe {
            let quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
            _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps::<0b01>(pair, pair)))
        }
    }

    #[inline(always)]
    unsafe fn load_f32(self, ptr: *const f32) -> __m256 {
        // SAFETY: reads 32 bytes, readable by the caller's contract; AVX2 as above.
        unsafe { _mm256_loadu_ps(ptr) }
    }

    #[inline(always)]
    unsafe fn widen_i8(self, ptr: *const i8) -> __m256 {
        // SAFETY: `_mm_loadl_epi64` reads exactly 8 bytes, readable by the caller's contract.
        unsafe { _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(ptr.cast()))) }
    }

    #[inline(always)]
    unsafe fn widen_bf16(self, ptr: *const u16) -> __m256 {
        // SAFETY: reads exactly 16 bytes, readable by the caller's contract. bf16 is the top
        // half of an f32, so zero-extending and shifting left by 16 is the exact conversion.
        unsafe {
            let wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(ptr.cast()));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(wide))
        }
    }

    #[inline(always)]
    fn load_padded<T: Element>(self, tail: &[T]) -> __m256 {
        let padded: [T; 8] = padded(tail);
        // SAFETY: `padded` holds a whole register of elements.
        unsafe { T::load(self, padded.as_ptr()) }
    }
}

impl IntegerDot for Avx2 {
    /// One `vpmovsxbw` of 16 bytes into 16 i16 lanes.
    const STEP: usize = 16;
    const PREFETCH_ROWS: usize = PREFETCH_ROWS;
    type Query = QueryI16;
    type QueryStep = __m256i;
    type Row = __m256i;
    type Acc = __m256i;
    type Widening = Self;

    #[inline(always)]
    fn widening(self) -> Self {
        self
    }

    #[inline(always)]
    fn zero(self) -> __m256i {
        // SAFETY: an `Avx2` proves AVX2 and FMA.
        unsafe { _mm256_setzero_si256() }
    }

    #[inline(always)]
    unsafe fn query_step(self, query: &QueryI16, col: usize) -> __m256i {
        // SAFETY: 16 values from `col`, within the query by the caller's contract.
        unsafe { _mm256_loadu_si256(query.values.as_ptr().add(col).cast()) }
    }

    #[inline(always)]
    unsafe fn load_row(self, ptr: *const i8) -> __m256i {
        // SAFETY: reads 16 bytes, readable by the caller's contract.
        unsafe { _mm256_cvtepi8_epi16(_mm_loadu_si128(ptr.cast())) }
    }

    #[inline(always)]
    fn load_row_tail(self, tail: &[i8]) -> __m256i {
        let padded: [i8; 16] = padded(tail);
        // SAFETY: `padded` holds a whole step.
        unsafe { self.load_row(padded.as_ptr()) }
    }

    #[inline(always)]
    fn mul_add(self, acc: __m256i, x: __m256i, q: __m256i) -> __m256i {
        // SAFETY: an `Avx2` proves AVX2.
        unsafe { _mm256_add_epi32(acc, _mm256_madd_epi16(x, q)) }
    }

    /// Sums the 8 i32 lanes, widened to i64 first so that the sum cannot overflow.
    #[inline(always)]
    fn sum(self, acc: __m256i, _query: &QueryI16) -> i64 {
        let mut lanes = [0i64; 4];
        // SAFETY: an `Avx2` proves AVX2; `lanes` holds exactly the 32 bytes stored.
        unsafe {
            let low = _mm256_cvtepi32_epi64(_mm256_castsi256_si128(acc));
            let high = _mm256_cvtepi32_epi64(_mm256_extracti128_si256::<1>(acc));
            _mm256_storeu_si256(lanes.as_mut_ptr().cast(), _mm256_add_epi64(low, high));
        }
        lanes.iter().sum()
    }
}

/// AVX2 [`super::dot_f32`].
///
/// # Safety
/// The CPU must support AVX2 and FMA ([`is_supported`]).
#[target_feature(enable = "avx2,fma")]
pub fn dot_f32_avx2(a: &[f32], b: &[f32]) -> f32 {
    generic::dot_f32(Avx2::new(), a, b)
}

/// AVX2 [`super::scan_f32`].
///
/// # Safety
/// The CPU must support AVX2 and FMA ([`is_supported`]).
#[target_feature(enable = "avx2,fma")]
pub fn scan_f32_avx2(query: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    generic::scan_rows(Avx2::new(), query, rows, stride, out);
}

/// AVX2 [`super::scan_i8`].
///
/// # Safety
/// The CPU must support AVX2 and FMA ([`is_supported`]).
#[target_feature(enable = "avx2,fma")]
pub fn scan_i8_avx2(query: &[f32], rows: &[i8], stride: usize, scales: &[f32], out: &mut [f32]) {
    integer::scan_i8(Avx2::new(), query, rows, stride, scales, out);
}

/// AVX2 [`super::scan_bf16`].
///
/// # Safety
/// The CPU must support AVX2 and FMA ([`is_supported`]).
#[target_feature(enable = "avx2,fma")]
pub fn scan_bf16_avx2(query: &[f32], rows: &[u16], stride: usize, out: &mut [f32]) {
    generic::scan_rows(Avx2::new(), query, rows, stride, out);
}

/// AVX2 [`super::scan_f32_batch`].
///
/// # Safety
/// The CPU must support AVX2 and FMA ([`is_supported`]).
#[target_feature(enable = "avx2,fma")]
pub fn scan_f32_batch_avx2(
    queries: &[f32],
    n_queries: usize,
    rows: &[f32],
    stride: usize,
    out: &mut [f32],
) {
    let simd = Avx2::new();
    generic::scan_batch::<_, _, QUERY_TILE, ROW_TILE>(simd, queries, n_queries, rows, stride, out);
}

/// AVX2 [`super::scan_i8_batch`].
///
/// # Safety
/// The CPU must support AVX2 and FMA ([`is_supported`]).
#[target_feature(enable = "avx2,fma")]
pub fn scan_i8_batch_avx2(
    queries: &[f32],
    n_queries: usize,
    rows: &[i8],
    stride: usize,
    scales: &[f32],
    out: &mut [f32],
) {
    let int = Avx2::new();
    integer::scan_i8_batch::<_, QUERY_TILE, ROW_TILE>(
        int, queries, n_queries, rows, stride, scales, out,
    );
}

/// AVX2 [`super::scan_bf16_batch`].
///
/// # Safety
/// The CPU must support AVX2 and FMA ([`is_supported`]).
#[target_feature(enable = "avx2,fma")]
pub fn scan_bf16_batch_avx2(
    queries: &[f32],
    n_queries: usize,
    rows: &[u16],
    stride: usize,
    out: &mut [f32],
) {
    let simd = Avx2::new();
    generic::scan_batch::<_, _, QUERY_TILE, ROW_TILE>(simd, queries, n_queries, rows, stride, out);
}

/// AVX2 [`super::read_probe_f32`]: four independent add chains, 32 floats per iteration.
///
/// # Safety
/// The CPU must support AVX2 and FMA ([`is_supported`]).
#[target_feature(enable = "avx2,fma")]
pub fn read_probe_f32_avx2(rows: &[f32]) -> f32 {
    generic::read_probe_f32(Avx2::new(), rows)
}
