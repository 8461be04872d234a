//! The query side of the integer int8 kernels: the query rounded to i16.
//!
//! With the query as i16 and the rows as i8, `vpmaddwd` multiplies and pairs up 32 (AVX-512)
//! or 16 (AVX2) products per instruction, exactly, in i32 lanes: half the instructions of
//! widening every row element to f32, and no rounding in the sum. The price is the rounding of
//! the query to 16 bits, a relative error of at most 2^-16 of its largest element, which
//! [`super::i8_error_bound`] accounts for.

/// Largest i16 magnitude a query element is mapped to: symmetric, and small enough that every
/// value splits into two signed bytes `256 h + l` (up to 32639), which the VNNI kernel needs.
/// Against the full 32767 this costs 0.4% more query rounding, and keeps every integer
/// kernel bitwise equal.
pub(crate) const QUERY_I16_MAX: f32 = 32639.0;

/// Largest dimension the integer path handles: each i32 lane accumulates at most
/// `dim / 16` pair sums of magnitude `2 * 32639 * 127`, which stays below 2^31 up to 4128
/// on AVX2 (8 lanes) and 8256 on AVX-512. Larger queries use the f32 widening kernels.
// The integer kernels exist on x86_64 only; other targets keep the limit for tests and docs.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const INTEGER_MAX_DIM: usize = 4096;

/// A query rounded to i16, zero-padded to a multiple of the kernel's chunk so that the last
/// partial chunk can be loaded whole.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) struct QueryI16 {
    /// `round(query[j] / scale)`, then zeros up to the padded length.
    pub values: Vec<i16>,
    /// Multiplies an integer dot product back to the query's scale; NaN when the query holds
    /// a NaN or an infinity, so that the scores come out NaN as with the f32 kernels.
    pub scale: f32,
}

impl QueryI16 {
    /// Rounds `query` to i16 with scale `max|q| / QUERY_I16_MAX`, padded to a multiple of `chunk`.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    pub fn new(query: &[f32], chunk: usize) -> Self {
        let mut values = vec![0i16; query.len().div_ceil(chunk) * chunk];
        if query.iter().any(|q| !q.is_finite()) {
            return Self { values, scale: f32::NAN };
        }
        let max = query.iter().fold(0.0_f32, |max, q| max.max(q.abs()));
        if max == 0.0 {
            return Self { values, scale: 0.0 };
        }
        let scale = max / QUERY_I16_MAX;
        for (value, q) in values.iter_mut().zip(query) {
            // In range by construction; the clamp only absorbs the division's rounding.
            *value = (q / scale).round().clamp(-QUERY_I16_MAX, QUERY_I16_MAX) as i16;
        }
        Self { values, scale }
    }
}
