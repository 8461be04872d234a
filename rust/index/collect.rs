//! Candidate collection during a scan: which rows may still belong to the exact top-k.
//!
//! See the parent module for why keeping every row within `2E` of the k-th best scan score
//! (and within `E` of the threshold) is enough.

use super::GATED_REPORT_LEN;
use crate::gating::{Gate, Verdict};
use crate::topk::{Hit, TopK};

/// What every query of one search shares.
pub(super) struct ScanPlan<'g, 'a> {
    pub(super) k: usize,
    pub(super) threshold: Option<f32>,
    /// Bound on |scan score - exact score|, see [`super::score_error_bound`].
    pub(super) error: f32,
    pub(super) gate: &'g Gate<'a>,
}

/// Collects rows whose scan score may put them in the exact top-k (see the parent module docs).
pub(super) struct Collector {
    k: usize,
    /// `threshold - E`: rows below cannot reach the threshold.
    floor: f32,
    /// `2E`: how far below the k-th best scan score a row may still win.
    slack: f32,
    best: TopK,
    candidates: Vec<Hit>,
    /// Rows with a scan score below this are skipped; only ever rises.
    cutoff: f32,
}

impl Collector {
    fn new(k: usize, plan: &ScanPlan<'_, '_>) -> Self {
        let floor = plan.threshold.map_or(f32::NEG_INFINITY, |t| t - plan.error);
        Self {
            k,
            floor,
            slack: 2.0 * plan.error,
            best: TopK::new(k),
            candidates: Vec::new(),
            cutoff: floor,
        }
    }

    /// Offers one row. The caller skips rows below `cutoff` itself in its hot loop.
    #[inline]
    fn push(&mut self, row: u32, score: f32) {
        self.candidates.push(Hit { row, score });
        if self.k == usize::MAX {
            return;
        }
        self.best.push(row, score);
        if let Some(worst) = self.best.worst_when_full() {
            self.cutoff = self.floor.max(worst - self.slack);
            // Amortised pruning keeps the list near k even for adversarial orders.
            if self.candidates.len() >= 2 * self.k + 64 {
                let cutoff = self.cutoff;
                self.candidates.retain(|hit| hit.score >= cutoff);
            }
        }
    }

    fn merge(&mut self, other: Collector) {
        self.candidates.extend(other.candidates);
        self.best.merge(other.best);
        if let Some(worst) = self.best.worst_when_full() {
            self.cutoff = self.floor.max(worst - self.slack);
        }
    }

    /// The rows that may belong to the exact top-k.
    pub(super) fn into_rows(self) -> impl Iterator<Item = u32> {
        let cutoff = self.cutoff;
        self.candidates.into_iter().filter(move |hit| hit.score >= cutoff).map(|hit| hit.row)
    }
}

/// Scan state of one query: eligible candidates, gated candidates, counts.
pub(super) struct QueryScan {
    pub(super) eligible: Collector,
    pub(super) gated: Collector,
    pub(super) n_gated: usize,
    pub(super) n_out_of_scope: usize,
}

impl QueryScan {
    pub(super) fn new(plan: &ScanPlan<'_, '_>) -> Self {
        Self {
            eligible: Collector::new(plan.k, plan),
            gated: Collector::new(GATED_REPORT_LEN, plan),
            n_gated: 0,
            n_out_of_scope: 0,
        }
    }

    /// Consumes the scan scores of rows `start..start + scores.len()`.
    #[inline]
    pub(super) fn feed(&mut self, start: usize, scores: &[f32], gate: &Gate<'_>) {
        if gate.is_open() {
            // Almost every row is below the cut-off once k rows are held, so test 16 at a time
            // with a branch-free (vectorised) comparison and only walk the rare hits.
            for (chunk_index, chunk) in scores.chunks(16).enumerate() {
                let cutoff = self.eligible.cutoff;
                if !chunk.iter().fold(false, |any, &score| any | (score >= cutoff)) {
                    continue;
                }
                let first = start + chunk_index * 16;
                for (offset, &score) in chunk.iter().enumerate() {
                    // NaN (only from an unverified corrupt file) fails `>=` and is skipped.
                    if score >= self.eligible.cutoff {
                        self.eligible.push((first + offset) as u32, score);
                    }
                }
            }
            return;
        }
        for (offset, &score) in scores.iter().enumerate() {
            let row = start + offset;
            match gate.verdict(row) {
                Verdict::Eligible => {
                    if score >= self.eligible.cutoff {
                        self.eligible.push(row as u32, score);
                    }
                }
                Verdict::MissingFlags => {
                    self.n_gated += 1;
                    if score >= self.gated.cutoff {
                        self.gated.push(row as u32, score);
                    }
                }
                Verdict::OutOfScope => self.n_out_of_scope += 1,
            }
        }
    }

    pub(super) fn merge(&mut self, other: QueryScan) {
        self.eligible.merge(other.eligible);
        self.gated.merge(other.gated);
        self.n_gated += other.n_gated;
        self.n_out_of_scope += other.n_out_of_scope;
    }
}
