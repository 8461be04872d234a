//! Top-k selection with deterministic ties and an optional score threshold.
//!
//! Order is score descending, then row ascending, so equal scores always come out in the same
//! order whatever the scan order or thread split was. A NaN score never matches: it is neither
//! above nor below any threshold, so it is left out rather than ranked arbitrarily.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// A scored row, ordered so that the *better* hit compares greater: higher score, then lower
/// row. Scores are never NaN (callers filter them out first).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// Row number in the matrix.
    pub row: u32,
    /// Its score.
    pub score: f32,
}

impl Eq for Hit {}

impl Ord for Hit {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then_with(|| other.row.cmp(&self.row))
    }
}

impl PartialOrd for Hit {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A bounded selector of the `k` best hits pushed into it, in any order.
///
/// `k == usize::MAX` means unbounded (keep everything). Memory is `O(min(k, pushed))`.
#[derive(Debug, Clone)]
pub struct TopK {
    k: usize,
    /// Min-heap on `Hit` order: the root is the worst hit kept.
    heap: BinaryHeap<Reverse<Hit>>,
}

impl TopK {
    /// A selector keeping at most `k` hits (`usize::MAX`: all of them).
    pub fn new(k: usize) -> Self {
        let capacity = if k == usize::MAX { 0 } else { k.min(1 << 16) };
        Self { k, heap: BinaryHeap::with_capacity(capacity) }
    }

    /// Offers one hit; NaN scores are ignored.
    pub fn push(&mut self, row: u32, score: f32) {
        if score.is_nan() || self.k == 0 {
            return;
        }
        let hit = Hit { row, score };
        if self.heap.len() < self.k {
            self.heap.push(Reverse(hit));
        } else if let Some(mut worst) = self.heap.peek_mut() {
            if hit > worst.0 {
                *worst = Reverse(hit);
            }
        }
    }

    /// The score of the worst hit kept, once `k` hits are held; `None` before that.
    pub fn worst_when_full(&self) -> Option<f32> {
        if self.heap.len() >= self.k {
            self.heap.peek().map(|worst| worst.0.score)
        } else {
            None
        }
    }

    /// Number of hits held.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no hit is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Adds every hit of `other` (a selector for the same `k`, e.g. from another thread).
    pub fn merge(&mut self, other: TopK) {
        for Reverse(hit) in other.heap {
            self.push(hit.row, hit.score);
        }
    }

    /// The hits held, best first.
    pub fn into_sorted(self) -> Vec<Hit> {
        // `into_sorted_vec` sorts ascending by `Reverse<Hit>`, which is best first.
        self.heap.into_sorted_vec().into_iter().map(|Reverse(hit)| hit).collect()
    }
}

/// The best `k` rows of `scores` (all of them when `k >= scores.len()` or `k == usize::MAX`),
/// best first, as `(row, score)`.
///
/// Only rows with `eligible(row)` true and, when `threshold` is set, `score >= threshold`
/// are considered. Ties are broken by row ascending, so the result is deterministic.
///
/// # Panics
/// If `scores` has more than `u32::MAX` entries.
pub fn top_k(
    scores: &[f32],
    k: usize,
    threshold: Option<f32>,
    eligible: impl Fn(usize) -> bool,
) -> Vec<(u32, f32)> {
    assert!(u32::try_from(scores.len()).is_ok(), "top_k over more than u32::MAX rows");
    if k == 0 {
        return Vec::new();
    }
    let floor = threshold.unwrap_or(f32::NEG_INFINITY);
    // Hits gather in a buffer of 2k; each time it fills it is cut back to its best k (a
    // selection, not a sort) and the worst of those becomes the cutoff. Rows come in
    // ascending order, so a later row tying the cutoff ranks below it: only a higher score
    // gets in. Most rows cost one comparison, where a heap paid a sift per early entrant.
    let full = k.saturating_mul(2);
    let mut buffer: Vec<Hit> = Vec::with_capacity(full.min(scores.len()));
    let mut cutoff: Option<f32> = None;
    let better = |a: &Hit, b: &Hit| b.cmp(a);
    for (row, &score) in scores.iter().enumerate() {
        // `>=` with a NaN score is false, which drops it here already.
        if score >= floor && cutoff.is_none_or(|cut| score.total_cmp(&cut).is_gt()) && eligible(row)
        {
            buffer.push(Hit { row: row as u32, score });
            if buffer.len() == full {
                buffer.select_nth_unstable_by(k - 1, better);
                buffer.truncate(k);
                cutoff = Some(buffer[k - 1].score);
            }
        }
    }
    buffer.sort_unstable_by(better);
    buffer.truncate(k);
    buffer.into_iter().map(|hit| (hit.row, hit.score)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(scores: &[f32], k: usize, threshold: Option<f32>) -> Vec<(u32, f32)> {
        let mut all: Vec<(u32, f32)> = scores
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.is_nan() && threshold.is_none_or(|t| **s >= t))
            .map(|(i, &s)| (i as u32, s))
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        all.truncate(k);
        all
    }

    #[test]
    fn matches_a_full_sort_with_ties() {
        let mut state = 12345u64;
        for n in [0usize, 1, 5, 63, 64, 65, 1000, 10_001] {
            let scores: Vec<f32> = (0..n)
                .map(|_| {
                    state =
                        state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    ((state >> 40) % 17) as f32 / 16.0
                })
                .collect();
            for k in [1usize, 3, 10, 100, 200, n, n + 5, usize::MAX] {
                for threshold in [None, Some(0.5f32)] {
                    assert_eq!(
                        top_k(&scores, k, threshold, |_| true),
                        reference(&scores, k, threshold),
                        "n={n} k={k} threshold={threshold:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn skips_ineligible_rows_and_nan() {
        let scores = [0.9, f32::NAN, 0.8, 0.95, 0.1];
        assert_eq!(top_k(&scores, 2, None, |row| row != 3), vec![(0, 0.9), (2, 0.8)]);
        assert_eq!(top_k(&scores, 10, Some(0.85), |_| true), vec![(3, 0.95), (0, 0.9)]);
        assert!(top_k(&scores, 0, None, |_| true).is_empty());
    }
}
