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
//! the scan is faster than its `vpmovsxbw` + `vpmaddwd` (`benches/bench_kernels.py`; the
//! figures in docs/design.md, "Kernels and ISA dispatch").
//! The two planes are combined lane by lane (`256 h + l`) before the one horizontal sum per
//! row; see `LANE_FITS_I32` for why that cannot overflow.

use std::arch::x86_64::{
    __m512i, _mm512_add_epi32, _mm512_dpbusd_epi32, _mm512_loadu_si512, _mm512_set1_epi8,
    _mm512_setzero_si512, _mm512_slli_epi32, _mm512_xor_si512,
};

use super::avx512::{self, Avx512, QUERY_TILE, ROW_TILE};
use super::generic::integer::{self, IntegerDot, IntegerQuery};
use super::generic::padded;
use super::query_i16::{QueryI16, INTEGER_MAX_DIM};

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

/// Proof that the running CPU has AVX-512F, AVX-512BW and AVX512-VNNI: only code compiled with
/// all three can make one.
#[derive(Clone, Copy)]
struct Avx512Vnni(Avx512);

impl Avx512Vnni {
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    fn new() -> Self {
        Self(Avx512::new())
    }
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

impl IntegerQuery for QueryBytes {
    fn round(query: &[f32], step: usize) -> Self {
        let rounded = QueryI16::new(query, step);
        let (high, low) = rounded.values.iter().map(|&q| split(q)).unzip();
        let offset = 128 * rounded.values.iter().map(|&q| i64::from(q)).sum::<i64>();
        Self { high, low, offset, scale: rounded.scale }
    }

    #[inline(always)]
    fn padded_len(&self) -> usize {
        self.low.len()
    }

    #[inline(always)]
    fn scale(&self) -> f32 {
        self.scale
    }
}

/// `(h, l)` with `q = 256 h + l`, both signed bytes. Exists for `-32896 <= q <= 32639`, which
/// is why `QUERY_I16_MAX` is 32639.
fn split(q: i16) -> (i8, i8) {
    let low = q as i8; // the low byte, reinterpreted as signed
    let high = (i32::from(q) - i32::from(low)) / 256;
    (i8::try_from(high).expect("query value outside the byte-split range"), low)
}

/// Two accumulators per row, one per query plane. No prefetch hints, unlike the other x86
/// kernels: on an L3-resident matrix the scan ran faster without them (docs/design.md); at
/// this density of work per byte the hardware prefetcher keeps up on its own.
impl IntegerDot for Avx512Vnni {
    const STEP: usize = STEP;
    const PREFETCH_ROWS: usize = 0;
    type Query = QueryBytes;
    /// The 64 high and low query bytes of a step.
    type QueryStep = [__m512i; 2];
    type Row = __m512i;
    /// The high and low planes' sums.
    type Acc = [__m512i; 2];
    type Widening = Avx512;

    #[inline(always)]
    fn widening(self) -> Avx512 {
        self.0
    }

    #[inline(always)]
    fn zero(self) -> [__m512i; 2] {
        // SAFETY: an `Avx512Vnni` proves AVX-512F.
        unsafe { [_mm512_setzero_si512(); 2] }
    }

    /// Checks the bounds itself.
    #[inline(always)]
    unsafe fn query_step(self, query: &QueryBytes, col: usize) -> [__m512i; 2] {
        let (high, low) = (&query.high[col..col + STEP], &query.low[col..col + STEP]);
        // SAFETY: both slices hold exactly 64 bytes; an `Avx512Vnni` proves AVX-512F.
        unsafe {
            [_mm512_loadu_si512(high.as_ptr().cast()), _mm512_loadu_si512(low.as_ptr().cast())]
        }
    }

    #[inline(always)]
    unsafe fn load_row(self, ptr: *const i8) -> __m512i {
        // SAFETY: reads 64 bytes, readable by the caller's contract.
        unsafe { _mm512_loadu_si512(ptr.cast()) }
    }

    /// The padding becomes 128 in [`Self::mul_add`], but meets the query's zero padding, so it
    /// adds nothing.
    #[inline(always)]
    fn load_row_tail(self, tail: &[i8]) -> __m512i {
        let padded: [i8; STEP] = padded(tail);
        // SAFETY: `padded` holds 64 bytes.
        unsafe { self.load_row(padded.as_ptr()) }
    }

    /// Flips the 64 signed row bytes `x` to unsigned and adds their products with the query
    /// planes to the planes' accumulators.
    #[inline(always)]
    fn mul_add(
        self,
        [acc_high, acc_low]: [__m512i; 2],
        x: __m512i,
        q: [__m512i; 2],
    ) -> [__m512i; 2] {
        let [high, low] = q;
        // SAFETY: an `Avx512Vnni` proves AVX-512F and AVX512-VNNI.
        unsafe {
            let unsigned = _mm512_xor_si512(x, _mm512_set1_epi8(i8::MIN));
            [
                _mm512_dpbusd_epi32(acc_high, unsigned, high),
                _mm512_dpbusd_epi32(acc_low, unsigned, low),
            ]
        }
    }

    /// One lane reduction per row rather than one per plane: `256 h + l` per lane first, which
    /// `LANE_FITS_I32` shows cannot overflow.
    #[inline(always)]
    fn sum(self, [high, low]: [__m512i; 2], query: &QueryBytes) -> i64 {
        let () = LANE_FITS_I32;
        // SAFETY: an `Avx512Vnni` proves AVX-512F.
        let lanes = unsafe { _mm512_add_epi32(_mm512_slli_epi32::<8>(high), low) };
        self.0.sum_i32_as_i64(lanes) - query.offset
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
    integer::scan_i8(Avx512Vnni::new(), query, rows, stride, scales, out);
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
    let int = Avx512Vnni::new();
    integer::scan_i8_batch::<_, QUERY_TILE, ROW_TILE>(
        int, queries, n_queries, rows, stride, scales, out,
    );
}
