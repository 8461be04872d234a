//! AVX-512 kernels (x86_64), 16 f32 lanes per register: `Simd` and `IntegerDot` for these
//! instructions, under the loops of `generic`, and a register-resident f32 scan.
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

use super::generic::integer::{self, IntegerDot};
use super::generic::{self, padded, Element, Simd, Tail};
use super::query_i16::QueryI16;
use super::{check_scan, prefetch, row, PREFETCH_ROWS};

/// f32 lanes per register.
const LANES: usize = 16;

/// Queries per batch tile: 4 queries x 2 rows x 2 accumulators + 8 query registers + 2 row
/// registers = 26 of the 32 zmm registers.
pub(super) const QUERY_TILE: usize = 4;

/// Rows per batch tile.
pub(super) const ROW_TILE: usize = 2;

/// Whether the running CPU has what this file relies on.
pub fn is_supported() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
}

/// Proof that the running CPU has AVX-512F and AVX-512BW: only code compiled with both can
/// make one.
#[derive(Clone, Copy)]
pub(super) struct Avx512(());

impl Avx512 {
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) fn new() -> Self {
        Self(())
    }
}

impl Simd for Avx512 {
    type F32 = __m512;
    const LANES: usize = LANES;
    const TAIL: Tail = Tail::ByRegister;
    const PREFETCH_ROWS: usize = PREFETCH_ROWS;

    #[inline(always)]
    fn prefetch<T>(self, ptr: *const T, count: usize) {
        prefetch(ptr, count);
    }

    #[inline(always)]
    fn zero(self) -> __m512 {
        // SAFETY: an `Avx512` proves AVX-512F and AVX-512BW.
        unsafe { _mm512_setzero_ps() }
    }

    #[inline(always)]
    fn add(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: an `Avx512` proves AVX-512F and AVX-512BW.
        unsafe { _mm512_add_ps(a, b) }
    }

    #[inline(always)]
    fn mul_add(self, acc: __m512, x: __m512, q: __m512) -> __m512 {
        // SAFETY: an `Avx512` proves AVX-512F and AVX-512BW.
        unsafe { _mm512_fmadd_ps(x, q, acc) }
    }

    #[inline(always)]
    fn sum(self, v: __m512) -> f32 {
        // SAFETY: an `Avx512` proves AVX-512F and AVX-512BW.
        unsafe { _mm512_reduce_add_ps(v) }
    }

    #[inline(always)]
    unsafe fn load_f32(self, ptr: *const f32) -> __m512 {
        // SAFETY: reads 64 bytes, readable by the caller's contract; AVX-512F as above.
        unsafe { _mm512_loadu_ps(ptr) }
    }

    #[inline(always)]
    unsafe fn widen_i8(self, ptr: *const i8) -> __m512 {
        // SAFETY: reads exactly 16 bytes, readable by the caller's contract.
        unsafe { _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(ptr.cast()))) }
    }

    #[inline(always)]
    unsafe fn widen_bf16(self, ptr: *const u16) -> __m512 {
        // SAFETY: reads exactly 32 bytes, readable by the caller's contract. bf16 is the top
        // half of an f32, so zero-extending and shifting left by 16 is the exact conversion.
        unsafe {
            let wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(ptr.cast()));
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(wide))
        }
    }

    #[inline(always)]
    fn load_padded<T: Element>(self, tail: &[T]) -> __m512 {
        let padded: [T; LANES] = padded(tail);
        // SAFETY: `padded` holds a whole register of elements.
        unsafe { T::load(self, padded.as_ptr()) }
    }

    /// A masked load: no buffer, and only `tail`'s elements are read.
    #[inline(always)]
    fn load_f32_tail(self, tail: &[f32]) -> __m512 {
        debug_assert!(tail.len() <= LANES);
        // Computed in u32 so that a full 16-element tail does not overflow the shift.
        let mask = ((1u32 << tail.len()) - 1) as u16;
        // SAFETY: masked-off lanes are never touched, so only `tail`'s elements are read;
        // AVX-512F as above.
        unsafe { _mm512_maskz_loadu_ps(mask, tail.as_ptr()) }
    }
}

impl IntegerDot for Avx512 {
    /// One `vpmovsxbw` of 32 bytes into 32 i16 lanes.
    const STEP: usize = 32;
    const PREFETCH_ROWS: usize = PREFETCH_ROWS;
    type Query = QueryI16;
    type QueryStep = __m512i;
    type Row = __m512i;
    type Acc = __m512i;
    type Widening = Self;

    #[inline(always)]
    fn widening(self) -> Self {
        self
    }

    #[inline(always)]
    fn zero(self) -> __m512i {
        // SAFETY: an `Avx512` proves AVX-512F and AVX-512BW.
        unsafe { _mm512_setzero_si512() }
    }

    #[inline(always)]
    unsafe fn query_step(self, query: &QueryI16, col: usize) -> __m512i {
        // SAFETY: 32 values from `col`, within the query by the caller's contract.
        unsafe { _mm512_loadu_epi16(query.values.as_ptr().add(col)) }
    }

    #[inline(always)]
    unsafe fn load_row(self, ptr: *const i8) -> __m512i {
        // SAFETY: reads 32 bytes, readable by the caller's contract.
        unsafe { _mm512_cvtepi8_epi16(_mm256_loadu_si256(ptr.cast())) }
    }

    #[inline(always)]
    fn load_row_tail(self, tail: &[i8]) -> __m512i {
        let padded: [i8; 32] = padded(tail);
        // SAFETY: `padded` holds a whole step.
        unsafe { self.load_row(padded.as_ptr()) }
    }

    #[inline(always)]
    fn mul_add(self, acc: __m512i, x: __m512i, q: __m512i) -> __m512i {
        // SAFETY: an `Avx512` proves AVX-512BW.
        unsafe { _mm512_add_epi32(acc, _mm512_madd_epi16(x, q)) }
    }

    #[inline(always)]
    fn sum(self, acc: __m512i, _query: &QueryI16) -> i64 {
        self.sum_i32_as_i64(acc)
    }
}

impl Avx512 {
    /// Sum of the 16 i32 lanes, widened to i64 first so that it cannot overflow.
    #[inline(always)]
    pub(super) fn sum_i32_as_i64(self, v: __m512i) -> i64 {
        // SAFETY: an `Avx512` proves AVX-512F.
        unsafe {
            let low = _mm512_cvtepi32_epi64(_mm512_castsi512_si256(v));
            let high = _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64::<1>(v));
            _mm512_reduce_add_epi64(_mm512_add_epi64(low, high))
        }
    }
}

/// `out[i] = dot(query, row i)` for f32 rows: [`scan_resident`] when the query fits in
/// registers, else [`generic::scan_rows`].
#[target_feature(enable = "avx512f,avx512bw")]
fn scan_f32_rows(query: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    macro_rules! by_chunks {
        ($($chunks:literal)*) => {
            match query.len().div_ceil(LANES) {
                $($chunks => scan_resident::<$chunks>(query, rows, stride, out),)*
                _ => generic::scan_rows(Avx512::new(), query, rows, stride, out),
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
/// hardware prefetcher stream them with no hints. [`generic::scan_rows`] reloads the query for
/// every group of rows and needs a hint per line, twice the instructions, which costs most when
/// a sibling hyperthread competes for the core: this kernel runs near the read probe, ahead of
/// the generic scan (docs/design.md, "Kernels and ISA dispatch"). bf16 rows gain nothing from
/// it: widening them costs the instructions anyway.
///
/// `C <= 24` keeps 24 query and 2 accumulator registers within the 32 zmm registers, spill-free.
/// Chunks go to the two accumulators as in [`generic::dot_tile`], so every score is bitwise the
/// one the batch and re-scoring paths compute.
#[target_feature(enable = "avx512f,avx512bw")]
fn scan_resident<const C: usize>(query: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    let simd = Avx512::new();
    let dim = query.len();
    assert!(C > 0 && dim.div_ceil(LANES) == C, "a {dim}-dimension query is not {C} chunks");
    check_scan(dim, rows.len(), stride, out.len());
    let partial_last = !dim.is_multiple_of(LANES);
    let last = (C - 1) * LANES;
    let mut held = [_mm512_setzero_ps(); C];
    for (chunk, slot) in held.iter_mut().enumerate() {
        *slot = if chunk * LANES + LANES <= dim {
            // SAFETY: the chunk lies within the query.
            unsafe { _mm512_loadu_ps(query.as_ptr().add(chunk * LANES)) }
        } else {
            simd.load_f32_tail(&query[chunk * LANES..])
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
        let (x, slot) = if partial_last {
            (simd.load_f32_tail(&row[last..]), 1)
        } else {
            // SAFETY: a whole last chunk lies within the row.
            (unsafe { _mm512_loadu_ps(row.as_ptr().add(last)) }, (C - 1) % 2)
        };
        acc[slot] = _mm512_fmadd_ps(x, held[C - 1], acc[slot]);
        *score = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
    }
}

/// AVX-512 [`super::dot_f32`].
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW ([`is_supported`]).
#[target_feature(enable = "avx512f,avx512bw")]
pub fn dot_f32_avx512(a: &[f32], b: &[f32]) -> f32 {
    generic::dot_f32(Avx512::new(), a, b)
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
    integer::scan_i8(Avx512::new(), query, rows, stride, scales, out);
}

/// AVX-512 [`super::scan_bf16`].
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW ([`is_supported`]).
#[target_feature(enable = "avx512f,avx512bw")]
pub fn scan_bf16_avx512(query: &[f32], rows: &[u16], stride: usize, out: &mut [f32]) {
    generic::scan_rows(Avx512::new(), query, rows, stride, out);
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
    let simd = Avx512::new();
    generic::scan_batch::<_, _, QUERY_TILE, ROW_TILE>(simd, queries, n_queries, rows, stride, out);
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
    let int = Avx512::new();
    integer::scan_i8_batch::<_, QUERY_TILE, ROW_TILE>(
        int, queries, n_queries, rows, stride, scales, out,
    );
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
    let simd = Avx512::new();
    generic::scan_batch::<_, _, QUERY_TILE, ROW_TILE>(simd, queries, n_queries, rows, stride, out);
}

/// AVX-512 [`super::read_probe_f32`]: four independent add chains, 64 floats per iteration.
///
/// # Safety
/// The CPU must support AVX-512F and AVX-512BW ([`is_supported`]).
#[target_feature(enable = "avx512f,avx512bw")]
pub fn read_probe_f32_avx512(rows: &[f32]) -> f32 {
    generic::read_probe_f32(Avx512::new(), rows)
}
