//! NEON kernels (aarch64, where Advanced SIMD is baseline), 4 f32 lanes per register.
//!
//! Little-endian aarch64 only (bf16 widening reinterprets u32 lanes as f32).
//!
//! Relies on `fmla` (`vfmaq_f32`) for the products, `ld1` loads, `sxtl`/`sxtl2` + `scvtf` to
//! widen int8, `ushll`/`ushll2` + `shl 16` to widen bf16, `fadd`/`faddp` for sums. Widening keeps
//! every product exact. Each step covers 8 columns as two registers; four rows share the query
//! registers and each row keeps one accumulator per register, eight FMA chains in all.

use std::arch::aarch64::{
    float32x4_t, vaddq_f32, vaddvq_f32, vcvtq_f32_s32, vdupq_n_f32, vfmaq_f32, vget_low_s16,
    vget_low_u16, vld1_s8, vld1q_f32, vld1q_u16, vmovl_high_s16, vmovl_high_u16, vmovl_s16,
    vmovl_s8, vmovl_u16, vreinterpretq_f32_u32, vshlq_n_u32,
};

use super::batch::{apply_scales, batch_shape, row_blocks, BatchShape};
use super::{check_scan, row, rows_from, GROUP_ROWS};

/// Columns per step: two 4-lane registers.
const STEP: usize = 8;

/// A storage type whose elements widen exactly to f32, 8 at a time.
trait Lanes: Copy + Default {
    /// Loads the 8 elements at `ptr` as two f32 registers.
    ///
    /// # Safety
    /// `ptr..ptr + 8` must be readable.
    unsafe fn load(ptr: *const Self) -> [float32x4_t; 2];

    /// Loads `tail` (at most 8 elements) as f32, zero-filling the missing lanes.
    #[inline(always)]
    fn load_tail(tail: &[Self]) -> [float32x4_t; 2] {
        let mut padded = [Self::default(); STEP];
        padded[..tail.len()].copy_from_slice(tail);
        // SAFETY: `padded` holds 8 elements.
        unsafe { Self::load(padded.as_ptr()) }
    }
}

impl Lanes for f32 {
    #[inline(always)]
    unsafe fn load(ptr: *const f32) -> [float32x4_t; 2] {
        // SAFETY: reads `ptr..ptr + 8`, readable by the caller's contract; NEON is baseline.
        unsafe { [vld1q_f32(ptr), vld1q_f32(ptr.add(4))] }
    }
}

impl Lanes for i8 {
    #[inline(always)]
    unsafe fn load(ptr: *const i8) -> [float32x4_t; 2] {
        // SAFETY: reads exactly 8 bytes, readable by the caller's contract; NEON is baseline.
        unsafe {
            let wide = vmovl_s8(vld1_s8(ptr));
            [vcvtq_f32_s32(vmovl_s16(vget_low_s16(wide))), vcvtq_f32_s32(vmovl_high_s16(wide))]
        }
    }
}

impl Lanes for u16 {
    #[inline(always)]
    unsafe fn load(ptr: *const u16) -> [float32x4_t; 2] {
        // SAFETY: reads exactly 16 bytes, readable by the caller's contract; NEON is baseline.
        // bf16 is the top half of an f32: zero-extend, shift left by 16, reinterpret.
        unsafe {
            let bits = vld1q_u16(ptr);
            let low = vshlq_n_u32::<16>(vmovl_u16(vget_low_u16(bits)));
            let high = vshlq_n_u32::<16>(vmovl_high_u16(bits));
            [vreinterpretq_f32_u32(low), vreinterpretq_f32_u32(high)]
        }
    }
}

/// Dot products of `query` with `R` rows, each exactly `query.len()` elements long.
#[target_feature(enable = "neon")]
#[inline]
fn dot_rows<T: Lanes, const R: usize>(query: &[f32], rows: [&[T]; R]) -> [f32; R] {
    let dim = query.len();
    for row in rows {
        assert_eq!(row.len(), dim);
    }
    let mut acc_a = [vdupq_n_f32(0.0); R];
    let mut acc_b = [vdupq_n_f32(0.0); R];
    let mut col = 0;
    while col + STEP <= dim {
        // SAFETY: `col + 8 <= dim` and the query and every row hold `dim` elements.
        let [q_a, q_b] = unsafe { f32::load(query.as_ptr().add(col)) };
        for r in 0..R {
            // SAFETY: as above.
            let [x_a, x_b] = unsafe { T::load(rows[r].as_ptr().add(col)) };
            acc_a[r] = vfmaq_f32(acc_a[r], x_a, q_a);
            acc_b[r] = vfmaq_f32(acc_b[r], x_b, q_b);
        }
        col += STEP;
    }
    if col < dim {
        let [q_a, q_b] = f32::load_tail(&query[col..]);
        for r in 0..R {
            let [x_a, x_b] = T::load_tail(&rows[r][col..]);
            acc_a[r] = vfmaq_f32(acc_a[r], x_a, q_a);
            acc_b[r] = vfmaq_f32(acc_b[r], x_b, q_b);
        }
    }
    let mut sums = [0.0; R];
    for r in 0..R {
        sums[r] = vaddvq_f32(vaddq_f32(acc_a[r], acc_b[r]));
    }
    sums
}

/// `out[i] = dot(query, row i)`, [`GROUP_ROWS`] rows at a time.
#[target_feature(enable = "neon")]
fn scan_rows<T: Lanes>(query: &[f32], rows: &[T], stride: usize, out: &mut [f32]) {
    let dim = query.len();
    check_scan(dim, rows.len(), stride, out.len());
    let mut groups = out.chunks_exact_mut(GROUP_ROWS);
    let mut first = 0;
    for group in &mut groups {
        let group_rows = rows_from(rows, first, stride, dim);
        group.copy_from_slice(&dot_rows::<T, GROUP_ROWS>(query, group_rows));
        first += GROUP_ROWS;
    }
    for (i, score) in groups.into_remainder().iter_mut().enumerate() {
        *score = dot_rows::<T, 1>(query, [row(rows, first + i, stride, dim)])[0];
    }
}

/// Scores of `n_queries` queries (back to back) against every row into `out`
/// (`n_queries x n_rows`): each query scans one L2-sized block of rows before the next block.
#[target_feature(enable = "neon")]
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
        for (query, scores) in queries.chunks_exact(dim).zip(out.chunks_exact_mut(n_rows)) {
            scan_rows(query, block_rows, stride, &mut scores[block.clone()]);
        }
    }
}

/// NEON [`super::dot_f32`].
///
/// # Safety
/// The CPU must support NEON, which every aarch64 CPU does.
#[target_feature(enable = "neon")]
pub fn dot_f32_neon(a: &[f32], b: &[f32]) -> f32 {
    dot_rows::<f32, 1>(a, [b])[0]
}

/// NEON [`super::scan_f32`].
///
/// # Safety
/// The CPU must support NEON, which every aarch64 CPU does.
#[target_feature(enable = "neon")]
pub fn scan_f32_neon(query: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    scan_rows(query, rows, stride, out);
}

/// NEON [`super::scan_i8`].
///
/// # Safety
/// The CPU must support NEON, which every aarch64 CPU does.
#[target_feature(enable = "neon")]
pub fn scan_i8_neon(query: &[f32], rows: &[i8], stride: usize, scales: &[f32], out: &mut [f32]) {
    assert_eq!(scales.len(), out.len(), "one scale per row");
    scan_rows(query, rows, stride, out);
    for (score, scale) in out.iter_mut().zip(scales) {
        *score *= scale;
    }
}

/// NEON [`super::scan_bf16`].
///
/// # Safety
/// The CPU must support NEON, which every aarch64 CPU does.
#[target_feature(enable = "neon")]
pub fn scan_bf16_neon(query: &[f32], rows: &[u16], stride: usize, out: &mut [f32]) {
    scan_rows(query, rows, stride, out);
}

/// NEON [`super::scan_f32_batch`].
///
/// # Safety
/// The CPU must support NEON, which every aarch64 CPU does.
#[target_feature(enable = "neon")]
pub fn scan_f32_batch_neon(
    queries: &[f32],
    n_queries: usize,
    rows: &[f32],
    stride: usize,
    out: &mut [f32],
) {
    scan_batch(queries, n_queries, rows, stride, out);
}

/// NEON [`super::scan_i8_batch`].
///
/// # Safety
/// The CPU must support NEON, which every aarch64 CPU does.
#[target_feature(enable = "neon")]
pub fn scan_i8_batch_neon(
    queries: &[f32],
    n_queries: usize,
    rows: &[i8],
    stride: usize,
    scales: &[f32],
    out: &mut [f32],
) {
    scan_batch(queries, n_queries, rows, stride, out);
    apply_scales(scales, out);
}

/// NEON [`super::scan_bf16_batch`].
///
/// # Safety
/// The CPU must support NEON, which every aarch64 CPU does.
#[target_feature(enable = "neon")]
pub fn scan_bf16_batch_neon(
    queries: &[f32],
    n_queries: usize,
    rows: &[u16],
    stride: usize,
    out: &mut [f32],
) {
    scan_batch(queries, n_queries, rows, stride, out);
}

/// NEON [`super::read_probe_f32`]: four independent add chains, 16 floats per iteration.
///
/// # Safety
/// The CPU must support NEON, which every aarch64 CPU does.
#[target_feature(enable = "neon")]
pub fn read_probe_f32_neon(rows: &[f32]) -> f32 {
    let mut acc = [vdupq_n_f32(0.0); 4];
    let mut blocks = rows.chunks_exact(16);
    for block in &mut blocks {
        for (k, acc) in acc.iter_mut().enumerate() {
            // SAFETY: `block` holds 16 elements, so lanes `4k .. 4k + 4` are in bounds.
            *acc = vaddq_f32(*acc, unsafe { vld1q_f32(block.as_ptr().add(4 * k)) });
        }
    }
    for chunk in blocks.remainder().chunks(STEP) {
        let [low, high] = f32::load_tail(chunk);
        acc[0] = vaddq_f32(acc[0], low);
        acc[1] = vaddq_f32(acc[1], high);
    }
    vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])))
}
