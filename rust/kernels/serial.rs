//! Portable kernels in plain Rust: the ground truth for every SIMD kernel.
//!
//! Written for clarity, not speed: one sequential sum per row, no intrinsics.

use super::check_scan;

/// Dot product of two f32 slices of equal length.
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// See [`super::scan_f32`].
pub fn scan_f32(query: &[f32], rows: &[f32], stride: usize, out: &mut [f32]) {
    let dim = query.len();
    check_scan(dim, rows.len(), stride, out.len());
    for (i, score) in out.iter_mut().enumerate() {
        *score = dot_f32(query, &rows[i * stride..i * stride + dim]);
    }
}

/// See [`super::scan_i8`].
pub fn scan_i8(query: &[f32], rows: &[i8], stride: usize, scales: &[f32], out: &mut [f32]) {
    let dim = query.len();
    check_scan(dim, rows.len(), stride, out.len());
    assert_eq!(scales.len(), out.len(), "one scale per row");
    for (i, score) in out.iter_mut().enumerate() {
        let row = &rows[i * stride..i * stride + dim];
        let dot: f32 = query.iter().zip(row).map(|(q, &r)| q * f32::from(r)).sum();
        *score = dot * scales[i];
    }
}

/// Widens bf16 bits to f32: bf16 is the top half of an IEEE f32.
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// See [`super::scan_bf16`].
pub fn scan_bf16(query: &[f32], rows: &[u16], stride: usize, out: &mut [f32]) {
    let dim = query.len();
    check_scan(dim, rows.len(), stride, out.len());
    for (i, score) in out.iter_mut().enumerate() {
        let row = &rows[i * stride..i * stride + dim];
        *score = query.iter().zip(row).map(|(q, &r)| q * bf16_to_f32(r)).sum();
    }
}

/// See [`super::read_probe_f32`].
pub fn read_probe_f32(rows: &[f32]) -> f32 {
    rows.iter().sum()
}
