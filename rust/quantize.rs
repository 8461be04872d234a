//! int8 (per-row scale) and bf16 storage of f32 rows.
//!
//! Each conversion also reports its *residual*: the largest Euclidean distance between a row
//! and its dequantized form. By Cauchy-Schwarz, a quantized score can then differ from the
//! exact one by at most `|query| * residual` (plus f32 rounding), which is what lets a search
//! over quantized rows re-score a provably sufficient set of candidates in f32.

/// Rows stored as int8 codes with one f32 scale per row: `row ~= scale * codes`.
#[derive(Debug, Clone)]
pub struct Int8Rows {
    /// `rows x dim` codes in `-127..=127`, row-major, no padding.
    pub codes: Vec<i8>,
    /// One scale per row (0 for an all-zero row).
    pub scales: Vec<f32>,
    /// Largest `|row - scale * codes|` over all rows, rounded up.
    pub residual: f32,
}

/// Rows stored as bf16 (the upper 16 bits of an f32, rounded to nearest even).
#[derive(Debug, Clone)]
pub struct Bf16Rows {
    /// `rows x dim` raw bf16 bits, row-major, no padding.
    pub bits: Vec<u16>,
    /// Largest `|row - bf16(row)|` over all rows, rounded up.
    pub residual: f32,
}

/// Quantizes each row of `rows` (`dim` values per row) to int8 with a symmetric per-row scale
/// `max|x| / 127`, so the largest component maps exactly onto +-127.
///
/// # Panics
/// If `dim == 0` or `rows.len()` is not a multiple of `dim`.
pub fn to_int8(rows: &[f32], dim: usize) -> Int8Rows {
    assert!(
        dim > 0 && rows.len().is_multiple_of(dim),
        "rows must be a whole number of {dim}-wide rows"
    );
    let mut codes = Vec::with_capacity(rows.len());
    let mut scales = Vec::with_capacity(rows.len() / dim);
    let mut residual = 0f64;
    for row in rows.chunks_exact(dim) {
        let max_abs = row.iter().fold(0f32, |m, x| m.max(x.abs()));
        let scale = max_abs / 127.0;
        let mut squared_error = 0f64;
        for &x in row {
            let code = if scale > 0.0 { (x / scale).round().clamp(-127.0, 127.0) } else { 0.0 };
            codes.push(code as i8);
            squared_error += (f64::from(x) - f64::from(scale) * f64::from(code)).powi(2);
        }
        scales.push(scale);
        residual = residual.max(squared_error.sqrt());
    }
    Int8Rows { codes, scales, residual: round_up(residual) }
}

/// Converts each value of `rows` to bf16 (round to nearest, ties to even).
///
/// # Panics
/// As [`to_int8`].
pub fn to_bf16(rows: &[f32], dim: usize) -> Bf16Rows {
    assert!(
        dim > 0 && rows.len().is_multiple_of(dim),
        "rows must be a whole number of {dim}-wide rows"
    );
    let bits: Vec<u16> = rows.iter().map(|&x| f32_to_bf16(x)).collect();
    let residual = rows
        .chunks_exact(dim)
        .zip(bits.chunks_exact(dim))
        .map(|(row, stored)| {
            row.iter()
                .zip(stored)
                .map(|(&x, &b)| (f64::from(x) - f64::from(bf16_to_f32(b))).powi(2))
                .sum::<f64>()
                .sqrt()
        })
        .fold(0f64, f64::max);
    Bf16Rows { bits, residual: round_up(residual) }
}

/// The bf16 nearest to a finite `x` (ties to even).
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    // Adding 0x7fff plus the lowest kept bit rounds half-way cases to an even mantissa.
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1));
    (rounded >> 16) as u16
}

/// Widens bf16 bits to f32 (exact).
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// An f32 no smaller than `x`: the f64 residual plus a relative margin that covers its own
/// rounding, so the bound stays a bound.
fn round_up(x: f64) -> f32 {
    let widened = x * (1.0 + 1e-6) + 1e-12;
    let narrowed = widened as f32;
    if f64::from(narrowed) < widened {
        f32::from_bits(narrowed.to_bits() + 1)
    } else {
        narrowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn int8_residual_bounds_every_row() {
        let rows: Vec<f32> = (0..7 * 5).map(|i| ((i * 37 % 11) as f32 - 5.0) / 9.0).collect();
        let q = to_int8(&rows, 7);
        for (r, row) in rows.chunks_exact(7).enumerate() {
            let error: f64 = row
                .iter()
                .zip(&q.codes[r * 7..r * 7 + 7])
                .map(|(&x, &c)| (f64::from(x) - f64::from(q.scales[r]) * f64::from(c)).powi(2))
                .sum::<f64>()
                .sqrt();
            assert!(error <= f64::from(q.residual));
            assert!(q.codes[r * 7..r * 7 + 7].iter().any(|c| c.abs() == 127));
        }
    }

    #[test]
    fn zero_rows_quantize_to_zero() {
        let q = to_int8(&[0.0; 4], 4);
        assert_eq!(q.codes, vec![0; 4]);
        assert_eq!(q.scales, vec![0.0]);
        assert_eq!(to_bf16(&[0.0; 4], 4).bits, vec![0; 4]);
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16_to_f32(f32_to_bf16(1.0)), 1.0);
        // 1 + 2^-8 is half-way between 1 and 1 + 2^-7: ties go to the even mantissa, 1.0.
        assert_eq!(bf16_to_f32(f32_to_bf16(1.0 + 1.0 / 256.0)), 1.0);
        assert_eq!(bf16_to_f32(f32_to_bf16(1.0 + 3.0 / 256.0)), 1.0 + 4.0 / 256.0);
        assert_eq!(bf16_to_f32(f32_to_bf16(-0.5)), -0.5);
    }
}
