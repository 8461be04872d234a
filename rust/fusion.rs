//! Fusion of a dense score array (cosines) and a BM25 array into one ranking score.
//!
//! Two families, chosen by [`FusionMethod`]:
//!
//! - **Weighted score fusion**: each signal is mapped onto a common scale by its own
//!   [`Normalizer`], then `fused = alpha · dense' + (1 − alpha) · sparse'`.
//! - **Reciprocal-rank fusion** (RRF): `fused = alpha / (k + rank_dense) + (1 − alpha) /
//!   (k + rank_sparse)` over each signal's best `top` rows (ranks from 1), a signal adding
//!   nothing for rows outside its top. BM25 rows scoring 0 matched no term and get no rank.
//!
//! Everything here is a pure function over slices; rows keep their positions.

use crate::error::{Error, Result};
use crate::topk::top_k;

/// How one signal's scores are mapped before weighting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Normalizer {
    /// Scores used as they are (cosines already live on a fixed scale).
    Raw,
    /// `(x − lo) / (hi − lo)` clamped to `[0, 1]`, where `hi` is the best score and `lo` the
    /// `top`-th best (`top = 0`: the worst). Only the head of the ranking sets the scale, so
    /// thousands of irrelevant rows do not compress the differences that matter. When
    /// `hi == lo` the rows at `hi` get 1 if `hi > 0` (they hold real evidence), else 0.
    MinMax {
        /// How many of the best rows set `lo`; 0 means all rows.
        top: usize,
    },
    /// `x / max`, clamped at 0; all zeros when the maximum is not positive. Suits BM25,
    /// whose zero means "no term matched".
    DivMax,
}

/// A way to fuse the two signals; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FusionMethod {
    /// Normalise each signal, then take the `alpha`-weighted sum.
    Weighted {
        /// Normaliser of the dense (cosine) scores.
        dense: Normalizer,
        /// Normaliser of the BM25 scores.
        sparse: Normalizer,
    },
    /// Weighted reciprocal-rank fusion.
    ReciprocalRank {
        /// The RRF constant (60 in the original paper); must be >= 0.
        k: f32,
        /// How many of each signal's best rows receive a rank; 0 means all rows.
        top: usize,
    },
}

impl FusionMethod {
    /// Min-max over each signal's best `top` rows.
    pub fn min_max(top: usize) -> Self {
        Self::Weighted { dense: Normalizer::MinMax { top }, sparse: Normalizer::MinMax { top } }
    }

    /// Raw cosines plus BM25 divided by its maximum.
    pub fn div_max() -> Self {
        Self::Weighted { dense: Normalizer::Raw, sparse: Normalizer::DivMax }
    }

    /// Reciprocal-rank fusion with constant `k` over each signal's best `top` rows.
    pub fn reciprocal_rank(k: f32, top: usize) -> Self {
        Self::ReciprocalRank { k, top }
    }
}

/// Fuses `dense` and `sparse` (one score per row each) with weight `alpha` on the dense
/// signal. Fails when the lengths differ, `alpha` is outside `[0, 1]`, a score is NaN or
/// infinite, or the RRF constant is negative.
pub fn fuse(dense: &[f32], sparse: &[f32], alpha: f32, method: FusionMethod) -> Result<Vec<f32>> {
    let mut out = vec![0.0; dense.len()];
    fuse_into(dense, sparse, alpha, method, &mut out)?;
    Ok(out)
}

/// [`fuse`] writing into `out`, which must have the inputs' length.
pub fn fuse_into(
    dense: &[f32],
    sparse: &[f32],
    alpha: f32,
    method: FusionMethod,
    out: &mut [f32],
) -> Result<()> {
    if sparse.len() != dense.len() || out.len() != dense.len() {
        return Err(Error::invalid(format!(
            "score arrays differ in length: dense {}, sparse {}, output {}",
            dense.len(),
            sparse.len(),
            out.len()
        )));
    }
    if !(0.0..=1.0).contains(&alpha) {
        return Err(Error::invalid(format!("alpha must be in [0, 1], got {alpha}")));
    }
    check_finite(dense, "dense")?;
    check_finite(sparse, "sparse")?;
    match method {
        FusionMethod::Weighted { dense: dense_norm, sparse: sparse_norm } => {
            Affine::fit(dense, dense_norm).write(dense, alpha, out);
            Affine::fit(sparse, sparse_norm).add(sparse, 1.0 - alpha, out);
        }
        FusionMethod::ReciprocalRank { k, top } => {
            if !(k.is_finite() && k >= 0.0) {
                return Err(Error::invalid(format!("RRF k must be finite and >= 0, got {k}")));
            }
            out.fill(0.0);
            add_reciprocal_ranks(dense, top, false, alpha, k, out);
            add_reciprocal_ranks(sparse, top, true, 1.0 - alpha, k, out);
        }
    }
    Ok(())
}

/// Maps one signal's scores into `[0, 1]` (or leaves them raw).
pub fn normalize(scores: &[f32], normalizer: Normalizer) -> Result<Vec<f32>> {
    check_finite(scores, "scores")?;
    let mut out = vec![0.0; scores.len()];
    Affine::fit(scores, normalizer).write(scores, 1.0, &mut out);
    Ok(out)
}

/// `Ok` when every score is finite, else an error naming the first that is not.
pub(crate) fn check_finite(scores: &[f32], what: &str) -> Result<()> {
    // A branch-free pass first (it vectorises); the position is searched only on failure.
    if scores.iter().fold(true, |ok, x| ok & x.is_finite()) {
        return Ok(());
    }
    let row = scores.iter().position(|x| !x.is_finite()).unwrap_or_default();
    Err(Error::invalid(format!("{what}[{row}] is {}, not a finite score", scores[row])))
}

/// Reduces finite, non-empty `scores` with `pick` (a max or min) over eight independent
/// lanes, so the loop vectorises.
fn reduce_lanes(scores: &[f32], pick: impl Fn(f32, f32) -> f32 + Copy) -> f32 {
    let mut lanes = [scores[0]; 8];
    let chunks = scores.chunks_exact(8);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane = pick(*lane, x);
        }
    }
    rest.iter().chain(&lanes).copied().fold(scores[0], pick)
}

fn max_of(scores: &[f32]) -> f32 {
    reduce_lanes(scores, |a, b| if b > a { b } else { a })
}

fn min_of(scores: &[f32]) -> f32 {
    reduce_lanes(scores, |a, b| if b < a { b } else { a })
}

/// `x -> clamp((x − shift) · scale, 0, 1)`, or the identity for [`Normalizer::Raw`].
struct Affine {
    shift: f32,
    scale: f32,
    clamp: bool,
    /// Degenerate min-max (`hi == lo`): the value rows at `hi` map to; others map to 0.
    flat: Option<(f32, f32)>,
}

impl Affine {
    fn fit(scores: &[f32], normalizer: Normalizer) -> Self {
        let identity = Self { shift: 0.0, scale: 1.0, clamp: false, flat: None };
        if scores.is_empty() {
            return identity;
        }
        let hi = max_of(scores);
        match normalizer {
            Normalizer::Raw => identity,
            Normalizer::DivMax => {
                let scale = if hi > 0.0 { 1.0 / hi } else { 0.0 };
                Self { shift: 0.0, scale, clamp: true, flat: None }
            }
            Normalizer::MinMax { top } => {
                let lo = kth_largest(scores, top);
                if hi > lo {
                    Self { shift: lo, scale: 1.0 / (hi - lo), clamp: true, flat: None }
                } else {
                    let at_hi = if hi > 0.0 { 1.0 } else { 0.0 };
                    Self { shift: 0.0, scale: 0.0, clamp: true, flat: Some((hi, at_hi)) }
                }
            }
        }
    }

    /// `out[i] = weight · f(scores[i])`.
    fn write(&self, scores: &[f32], weight: f32, out: &mut [f32]) {
        out.fill(0.0);
        self.add(scores, weight, out);
    }

    /// `out[i] += weight · f(scores[i])`. One loop per case, so each vectorises.
    fn add(&self, scores: &[f32], weight: f32, out: &mut [f32]) {
        let pairs = out.iter_mut().zip(scores);
        match (self.flat, self.clamp) {
            (Some((hi, at_hi)), _) => {
                pairs.for_each(|(o, &x)| *o += weight * if x >= hi { at_hi } else { 0.0 });
            }
            (None, true) => pairs.for_each(|(o, &x)| {
                *o += weight * ((x - self.shift) * self.scale).clamp(0.0, 1.0);
            }),
            (None, false) => {
                pairs.for_each(|(o, &x)| *o += weight * ((x - self.shift) * self.scale))
            }
        }
    }
}

/// The `top`-th largest score (`top = 0` or `top >= len`: the smallest), in `f32::total_cmp`
/// order. `scores` is non-empty and finite.
///
/// Scores above a cutoff gather in a buffer of `2 top`; each time it fills, it is cut back to
/// its best `top` (a selection, not a sort) and the cutoff rises to the least of them, since a
/// score at or below it cannot be among the best `top`. Most rows then cost one comparison
/// (as in [`top_k`], but without rows to keep), and a route fuses once per clause.
fn kth_largest(scores: &[f32], top: usize) -> f32 {
    if top == 0 || top >= scores.len() {
        return min_of(scores);
    }
    let descending = |a: &f32, b: &f32| b.total_cmp(a);
    let mut buffer: Vec<f32> = Vec::with_capacity(2 * top);
    let mut cutoff = f32::NEG_INFINITY;
    for &score in scores {
        if score.total_cmp(&cutoff).is_gt() {
            buffer.push(score);
            if buffer.len() == 2 * top {
                buffer.select_nth_unstable_by(top - 1, descending);
                buffer.truncate(top);
                cutoff = buffer[top - 1];
            }
        }
    }
    // Fewer than `top` scores beat -inf only when fewer than `top` rows exist: not here.
    *buffer.select_nth_unstable_by(top - 1, descending).1
}

/// Adds `weight / (k + rank)` to `out` for each of the `top` best rows of `scores`, skipping
/// rows scoring <= 0 when `positive_only`. A row's rank is 1 + the number of rows scoring
/// above it, so tied rows share one (1, 2, 2, 4), and every row tied with the last one kept
/// is ranked too: a row's fused score must not depend on where the catalog puts it among the
/// rows it ties with (BM25 gives runs of one score).
fn add_reciprocal_ranks(
    scores: &[f32],
    top: usize,
    positive_only: bool,
    weight: f32,
    k: f32,
    out: &mut [f32],
) {
    if weight == 0.0 {
        return;
    }
    let eligible = |row: usize| !positive_only || scores[row] > 0.0;
    let limit = if top == 0 { usize::MAX } else { top };
    let ranked = top_k(scores, limit, None, eligible);
    let mut rank = 0;
    for (place, &(row, score)) in ranked.iter().enumerate() {
        // `!=`, not the total order: 0.0 and -0.0 are one score, and share a rank.
        if place == 0 || score != ranked[place - 1].1 {
            rank = place + 1;
        }
        out[row as usize] += weight / (k + rank as f32);
    }
    let Some(&(_, last)) = ranked.last() else { return };
    if ranked.len() < limit {
        return;
    }
    // The other rows tied with the last one kept share its rank. The cut kept some of them,
    // not always those of lowest row (0.0 sorts above -0.0): skip those it kept by row.
    let mut kept: Vec<u32> =
        ranked.iter().rev().take_while(|hit| hit.1 == last).map(|hit| hit.0).collect();
    kept.sort_unstable();
    for (row, &score) in scores.iter().enumerate() {
        if score == last && eligible(row) && kept.binary_search(&(row as u32)).is_err() {
            out[row] += weight / (k + rank as f32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_max_over_the_head() {
        let scores = [0.1, 0.9, 0.5, 0.3, 0.7];
        let n = normalize(&scores, Normalizer::MinMax { top: 3 }).unwrap();
        // The 3rd best is 0.5: it maps to 0, the best to 1, anything lower to 0.
        let want = [0.0, 1.0, 0.0, 0.0, 0.5];
        for (got, want) in n.iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{n:?}");
        }
        let all = normalize(&scores, Normalizer::MinMax { top: 0 }).unwrap();
        assert!((all[3] - 0.25).abs() < 1e-6);
    }

    #[test]
    fn the_kth_largest_is_that_of_a_full_sort() {
        let mut state = 7u64;
        for n in [2usize, 5, 63, 64, 65, 1000, 10_001] {
            let scores: Vec<f32> = (0..n)
                .map(|i| {
                    state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    // Ties, zeros of both signs, and runs of one value as BM25 gives.
                    match i % 7 {
                        0 => 0.0,
                        1 => -0.0,
                        _ => ((state >> 40) % 37) as f32 / 8.0 - 2.0,
                    }
                })
                .collect();
            let mut sorted = scores.clone();
            sorted.sort_by(|a, b| b.total_cmp(a));
            for top in [1, 2, 3, 10, 100, n - 1].into_iter().filter(|&top| top < n) {
                let got = kth_largest(&scores, top);
                assert_eq!(got.to_bits(), sorted[top - 1].to_bits(), "n={n} top={top}");
            }
            // Past the length: the smallest (by value: the sign of a zero is not kept).
            for top in [0, n, n + 1] {
                assert_eq!(kth_largest(&scores, top), sorted[n - 1], "n={n} top={top}");
            }
        }
    }

    #[test]
    fn degenerate_ranges() {
        assert_eq!(normalize(&[0.0, 0.0], Normalizer::MinMax { top: 0 }).unwrap(), [0.0, 0.0]);
        assert_eq!(normalize(&[2.0, 2.0], Normalizer::MinMax { top: 1 }).unwrap(), [1.0, 1.0]);
        assert_eq!(normalize(&[0.0, 0.0], Normalizer::DivMax).unwrap(), [0.0, 0.0]);
        assert!(normalize(&[], Normalizer::DivMax).unwrap().is_empty());
    }

    #[test]
    fn reciprocal_ranks_share_ties() {
        // Tied scores share the first one's rank, and rows tied at the cut all get in: a
        // row's fused score must not depend on its place in the catalog.
        let dense = [0.5, 0.5, 0.9, 0.2];
        let sparse = [0.0; 4];
        let fused = fuse(&dense, &sparse, 1.0, FusionMethod::reciprocal_rank(0.0, 2)).unwrap();
        assert_eq!(fused, [0.5, 0.5, 1.0, 0.0]);
        let dense = [0.3, 0.5, 0.5, 0.5, 0.1];
        let fused =
            fuse(&dense, &sparse_of(5), 1.0, FusionMethod::reciprocal_rank(0.0, 0)).unwrap();
        assert_eq!(fused, [0.25, 1.0, 1.0, 1.0, 0.2]);
    }

    #[test]
    fn reciprocal_ranks_do_not_depend_on_row_order() {
        let dense = [0.4, 0.7, 0.4, 0.4, 0.9, 0.1, 0.4];
        let sparse = [1.0, 0.0, 2.0, 1.0, 0.0, 1.0, 2.0];
        let method = FusionMethod::reciprocal_rank(1.0, 3);
        let fused = fuse(&dense, &sparse, 0.6, method).unwrap();
        let reversed = |v: &[f32]| v.iter().rev().copied().collect::<Vec<f32>>();
        let back = fuse(&reversed(&dense), &reversed(&sparse), 0.6, method).unwrap();
        assert_eq!(fused, reversed(&back));
    }

    fn sparse_of(n: usize) -> Vec<f32> {
        vec![0.0; n]
    }

    #[test]
    fn rejects_bad_input() {
        let m = FusionMethod::min_max(10);
        assert!(fuse(&[0.1], &[0.1, 0.2], 0.5, m).is_err());
        assert!(fuse(&[0.1], &[0.2], 1.5, m).is_err());
        let err = fuse(&[0.1, f32::NAN], &[0.2, 0.3], 0.5, m).unwrap_err();
        assert!(err.to_string().contains("dense[1]"), "{err}");
        assert!(fuse(&[0.1], &[0.2], 0.5, FusionMethod::reciprocal_rank(-1.0, 0)).is_err());
    }
}
