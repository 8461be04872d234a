//! NEON kernels (aarch64, where Advanced SIMD is baseline), 4 f32 lanes per register: `Simd`
//! for these instructions, under the loops of `generic`.
//!
//! Little-endian aarch64 only (bf16 widening reinterprets u32 lanes as f32).
//!
//! Relies on `fmla` (`vfmaq_f32`) for the products, `ld1` loads, `sxtl`/`sxtl2` + `scvtf` to
//! widen int8, `ushll`/`ushll2` + `shl 16` to widen bf16, `fadd`/`faddp` for sums. Widening keeps
//! every product exact. Each step covers 8 columns as two registers, loaded at once; four rows
//! share the query registers and each row keeps one accumulator per register, eight FMA chains
//! in all. The columns after the last whole step are zero-padded to one (`Tail::ByStep`).
//! Batches scan one query at a time within each L2-sized block of rows.

use std::arch::aarch64::{
    float32x4_t, vaddq_f32, vaddvq_f32, vcvtq_f32_s32, vdup_n_s32, vdupq_n_f32, vfmaq_f32,
    vget_low_s16, vget_low_u16, vld1_s8, vld1_u16, vld1q_f32, vld1q_u16, vmovl_high_s16,
    vmovl_high_u16, vmovl_s16, vmovl_s8, vmovl_u16, vreinterpret_s8_s32, vreinterpretq_f32_u32,
    vshlq_n_u32,
};

use super::generic::{self, padded, Element, Simd, Tail};
use super::GROUP_ROWS;

/// Proof that the running CPU has NEON, as every aarch64 CPU does.
#[derive(Clone, Copy)]
struct Neon(());

impl Neon {
    #[target_feature(enable = "neon")]
    fn new() -> Self {
        Self(())
    }
}

impl Simd for Neon {
    type F32 = float32x4_t;
    const LANES: usize = 4;
    const TAIL: Tail = Tail::ByStep;

    #[inline(always)]
    fn zero(self) -> float32x4_t {
        // SAFETY: a `Neon` proves NEON.
        unsafe { vdupq_n_f32(0.0) }
    }

    #[inline(always)]
    fn add(self, a: float32x4_t, b: float32x4_t) -> float32x4_t {
        // SAFETY: a `Neon` proves NEON.
        unsafe { vaddq_f32(a, b) }
    }

    #[inline(always)]
    fn mul_add(self, acc: float32x4_t, x: float32x4_t, q: float32x4_t) -> float32x4_t {
        // SAFETY: a `Neon` proves NEON.
        unsafe { vfmaq_f32(acc, x, q) }
    }

    #[inline(always)]
    fn sum(self, v: float32x4_t) -> f32 {
        // SAFETY: a `Neon` proves NEON.
        unsafe { vaddvq_f32(v) }
    }

    #[inline(always)]
    unsafe fn load_f32(self, ptr: *const f32) -> float32x4_t {
        // SAFETY: reads 16 bytes, readable by the caller's contract; NEON as above.
        unsafe { vld1q_f32(ptr) }
    }

    #[inline(always)]
    unsafe fn widen_i8(self, ptr: *const i8) -> float32x4_t {
        // SAFETY: reads exactly 4 bytes, readable by the caller's contract; NEON as above.
        unsafe {
            let bytes = ptr.cast::<i32>().read_unaligned();
            let wide = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(bytes)));
            vcvtq_f32_s32(vmovl_s16(vget_low_s16(wide)))
        }
    }

    #[inline(always)]
    unsafe fn widen_bf16(self, ptr: *const u16) -> float32x4_t {
        // SAFETY: reads exactly 8 bytes, readable by the caller's contract; NEON as above.
        // bf16 is the top half of an f32: zero-extend, shift left by 16, reinterpret.
        unsafe { vreinterpretq_f32_u32(vshlq_n_u32::<16>(vmovl_u16(vld1_u16(ptr)))) }
    }

    /// One 8-byte load for both registers.
    #[inline(always)]
    unsafe fn widen_i8_step(self, ptr: *const i8) -> [float32x4_t; 2] {
        // SAFETY: reads exactly 8 bytes, readable by the caller's contract; NEON as above.
        unsafe {
            let wide = vmovl_s8(vld1_s8(ptr));
            [vcvtq_f32_s32(vmovl_s16(vget_low_s16(wide))), vcvtq_f32_s32(vmovl_high_s16(wide))]
        }
    }

    /// One 16-byte load for both registers.
    #[inline(always)]
    unsafe fn widen_bf16_step(self, ptr: *const u16) -> [float32x4_t; 2] {
        // SAFETY: reads exactly 16 bytes, readable by the caller's contract; NEON as above.
        unsafe {
            let bits = vld1q_u16(ptr);
            let low = vshlq_n_u32::<16>(vmovl_u16(vget_low_u16(bits)));
            let high = vshlq_n_u32::<16>(vmovl_high_u16(bits));
            [vreinterpretq_f32_u32(low), vreinterpretq_f32_u32(high)]
        }
    }

    #[inline(always)]
    fn load_padded<T: Element>(self, tail: &[T]) -> float32x4_t {
        let padded: [T; 4] = padded(tail);
        // SAFETY: `padded` holds a whole register of elements.
        unsafe { T::load(self, padded.as_ptr()) }
    }
}

/// NEON [`super::dot_f32`].
///
/// # Safety
/// The CPU must support NEON, which every aarch64 CPU does.
#[target_feature(enable = "neon")]
pub fn dot_f32_neon(a: &[f32], b: &[f32]) -> f32 {
    generic::dot_f32(Neon::new(), a, b)
}

/// NEON [`super::scan_f32`].
///
/// # Safety
/// The CPU must support NEON, which every aarch64 CPU does.
#[target_feature(enable = "neon")]
pub fn scan_f32_neon(query: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    generic::scan_rows(Neon::new(), query, rows, stride, out);
}

/// NEON [`super::scan_i8`].
///
/// # Safety
/// The CPU must support NEON, which every aarch64 CPU does.
#[target_feature(enable = "neon")]
pub fn scan_i8_neon(query: &[f32], rows: &[i8], stride: usize, scales: &[f32], out: &mut [f32]) {
    generic::scan_i8(Neon::new(), query, rows, stride, scales, out);
}

/// NEON [`super::scan_bf16`].
///
/// # Safety
/// The CPU must support NEON, which every aarch64 CPU does.
#[target_feature(enable = "neon")]
pub fn scan_bf16_neon(query: &[f32], rows: &[u16], stride: usize, out: &mut [f32]) {
    generic::scan_rows(Neon::new(), query, rows, stride, out);
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
    generic::scan_batch::<_, _, 1, GROUP_ROWS>(Neon::new(), queries, n_queries, rows, stride, out);
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
    let simd = Neon::new();
    generic::scan_i8_batch::<_, 1, GROUP_ROWS>(simd, queries, n_queries, rows, stride, scales, out);
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
    generic::scan_batch::<_, _, 1, GROUP_ROWS>(Neon::new(), queries, n_queries, rows, stride, out);
}

/// NEON [`super::read_probe_f32`]: four independent add chains, 16 floats per iteration.
///
/// # Safety
/// The CPU must support NEON, which every aarch64 CPU does.
#[target_feature(enable = "neon")]
pub fn read_probe_f32_neon(rows: &[f32]) -> f32 {
    generic::read_probe_f32(Neon::new(), rows)
}
