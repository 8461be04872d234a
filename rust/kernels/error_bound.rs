//! How far an int8 score can be from the f32 score of the row it was quantised from.
//!
//! Let `x` be an f32 row of dimension `d`, `s` its scale and `r` its int8 codes, produced by
//! round-to-nearest: `s = max|x_j| / 127` and `r_j = round(x_j / s)` clamped to [-127, 127],
//! both computed in f32. Then `|x_j - s r_j| <= s (1/2 + 256 u)` with `u = 2^-24` (the
//! division's rounding can move `x_j / s` by at most `128 u`, the clamp by less).
//!
//! An f32 kernel returns `f = fl(sum q_j x_j)` in some order; with Higham's
//! `gamma_n = n u / (1 - n u)`, `|f - sum q_j x_j| <= gamma_{d+1} sum |q_j x_j|`, and
//! `|x_j| <= 128 s`.
//!
//! The int8 scan computes `a` in one of two ways:
//!
//! * widening (serial, NEON, and x86 above `INTEGER_MAX_DIM`): `a = fl(s * fl(sum q_j r_j))`,
//!   off from `s sum q_j r_j` by at most `s * 127 ||q||_1 gamma_{d+2}`;
//! * integer (AVX2, AVX-512, AVX-512 VNNI): the query is rounded to `Q_j = round(q_j / t)`
//!   with `t = max|q| / 32639` (`QUERY_I16_MAX`), so `|t Q_j - q_j| <= t (1/2 + 2^-10)`; `D = sum Q_j r_j` is exact and
//!   `a = fl(fl(fl(D) t) s)`. Then `|a - s t D| <= gamma_3 s * 127 d max|q| (1 + 2^-10)` and
//!   `|s t D - s sum q_j r_j| <= s * 127 d max|q| (1/2 + 2^-10) / 32639`, and
//!   `(1/2 + 2^-10) / 32639 < 1/65000`.
//!
//! Adding the row quantisation `s ||q||_1 (1/2 + 256 u)` and the f32 kernel's own error, for
//! either path
//!
//! `|a - f| <= s (||q||_1 (1/2 + 256 u + 255 gamma_{d+2}) + 127 d max|q| (gamma_3 + 1/65000))`
//!
//! and the same bound holds against the exact real dot product. For a normalised 384-d query
//! the second term adds about 2% to the first. A re-scorer that keeps every row `i` with
//! `a_i + bound_i >= t_k`, where `t_k` is the k-th largest `a_j - bound_j`, keeps every row of
//! the f32 top-k; re-scoring those exactly then yields the f32 top-k.

/// Unit roundoff of f32 round-to-nearest.
const UNIT_ROUNDOFF: f64 = f32::EPSILON as f64 / 2.0;

/// Higham's `gamma_n = n u / (1 - n u)`.
fn gamma(n: usize) -> f64 {
    let nu = n as f64 * UNIT_ROUNDOFF;
    assert!(nu < 0.5, "dimension {n} too large for an f32 error bound");
    nu / (1.0 - nu)
}

/// `F` such that `F * scale` (computed in f32) bounds `|int8 score - f32 score|` for a row of
/// that scale: see the module documentation for the derivation and its assumptions on how
/// rows are quantised. Compute it once per query and reuse it for every row.
///
/// Infinite or NaN when the query holds infinities or NaN, which callers reject earlier.
pub fn i8_error_bound_factor(query: &[f32]) -> f32 {
    let dim = query.len();
    let l1_norm: f64 = query.iter().map(|&q| f64::from(q.abs())).sum();
    let max_abs = query.iter().fold(0.0_f64, |max, &q| max.max(f64::from(q.abs())));
    let row_rounding = l1_norm * (0.5 + 256.0 * UNIT_ROUNDOFF + 255.0 * gamma(dim + 2));
    let query_rounding = 127.0 * dim as f64 * max_abs * (gamma(3) + 1.0 / 65_000.0);
    // Inflate by 2^-20 so that narrowing to f32 and the caller's f32 multiply by the scale
    // (two roundings of at most 2^-24 each) can only make the bound larger than the truth.
    let factor = (row_rounding + query_rounding) * (1.0 + 16.0 * UNIT_ROUNDOFF);
    factor as f32
}

/// Upper bound on `|int8 score - f32 score|` for one row with the given scale; equal to
/// `i8_error_bound_factor(query) * scale.abs()`.
pub fn i8_error_bound(query: &[f32], scale: f32) -> f32 {
    i8_error_bound_factor(query) * scale.abs()
}

/// Upper bound on how far the integer int8 kernels' rounding of the query to i16 can move a
/// score, for a query of Euclidean norm `query_norm` against a dequantised row (`s * r`) of
/// Euclidean norm at most `row_norm`.
///
/// By Cauchy-Schwarz the shift is at most `||t Q - q||_2 * ||s r||_2`, and each of the `d`
/// rounded elements moves by at most `t (1/2 + 2^-10)` with `t = max|q| / QUERY_I16_MAX <=
/// ||q||_2 / QUERY_I16_MAX`. This is the term to add to a bound built from row residuals (as `index.rs` does) when
/// int8 rows are scanned; the widening int8 kernels (serial, NEON, dimensions above
/// `INTEGER_MAX_DIM`) do not round the query and stay well inside it. The integer kernels' other
/// roundings (converting and scaling the exact integer sum: `gamma_3` relative) are smaller
/// than the `gamma_{d+1}` f32 accumulation error such bounds already allow for.
pub fn i8_query_rounding_bound(dim: usize, query_norm: f64, row_norm: f64) -> f64 {
    let step =
        query_norm / f64::from(super::query_i16::QUERY_I16_MAX) * (1.0 + 4.0 * UNIT_ROUNDOFF);
    (dim as f64).sqrt() * step * (0.5 + 1.0 / 1024.0) * row_norm * (1.0 + 1e-9)
}
