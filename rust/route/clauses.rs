//! A multi-intent query's clauses, each scored as a query of its own: for clause fusion and
//! for the per-clause rankings of [`Ranking::clause_k`](super::Ranking::clause_k).
//!
//! The clause vectors of [`dense_signal`](super::dense_signal) lift a tool that fits one
//! intent, but only through the cosine: a clause's own words never reach BM25, whose
//! whole-query scores favour the intent with the most matching terms. Here each clause is
//! scored as a query would be (its vector over every row, its text by BM25, the two fused by
//! the route's own method). For clause fusion each row gains `weight` times its best clause
//! score; the first clauses' scores are also kept, to be ranked on their own in the same
//! route. A clause that is both is scored once, and the cosines of all of them come from one
//! pass over the matrix. The figures: docs/design.md, "Clause fusion".

use super::{defer_near_copies, Ranking, RoutedRow};
use crate::bm25::Bm25Index;
use crate::error::{Error, Result};
use crate::fusion::{self, FusionMethod};
use crate::index::Index;
use crate::topk::TopK;

/// Fewest words (split at white space) a clause needs to be fused on its own.
///
/// Shorter clauses are mostly argument fragments ("with precision 3", "in Celsius") of
/// single-intent requests, which BFCL's queries cut into by the dozen: fused on their own
/// they pull up tools that fit a fragment. Clauses of six words or more kept the multi-tool
/// lift at BFCL's ranking (docs/design.md, "Clause fusion").
pub const CLAUSE_FUSION_MIN_WORDS: usize = 6;

/// The clauses a query is fused by, and how much their best score weighs.
#[derive(Debug, Clone, Copy)]
pub struct ClauseFusion<'a> {
    /// Clause vectors, back to back (the route's `clauses`).
    pub vectors: &'a [f32],
    /// Each clause's text, aligned with `vectors`.
    pub texts: &'a [&'a str],
    /// Weight of a row's best clause score in its fused score; 0 turns clause fusion off.
    pub weight: f32,
}

/// One clause scored over every row as a query of its own.
#[derive(Debug, Clone, Default)]
pub struct ClauseScores {
    /// The clause vector's cosine, at the index's storage precision.
    pub cosine: Vec<f32>,
    /// BM25 scores of the clause's text.
    pub sparse: Vec<f32>,
    /// The two fused by the route's method.
    pub fused: Vec<f32>,
}

/// Adds to each row's `fused` score `weight` times its best fused score over the query's
/// clauses of at least [`CLAUSE_FUSION_MIN_WORDS`] words, each clause fused from its own
/// cosine (every row, at the index's storage precision) and BM25 with `alpha` and `method`;
/// returns the scores of the first `ranked` clauses, scored the same way.
///
/// Nothing is added at weight 0, or when fewer than two clauses are long enough: a query of
/// one intent is ranked by the whole query alone.
pub fn score_clauses(
    index: &Index,
    bm25: &Bm25Index,
    clauses: &ClauseFusion<'_>,
    ranked: usize,
    alpha: f32,
    method: FusionMethod,
    fused: &mut [f32],
) -> Result<Vec<ClauseScores>> {
    let weight = clauses.weight;
    if !(weight.is_finite() && weight >= 0.0) {
        return Err(Error::invalid(format!("clause_fusion must be finite and >= 0, got {weight}")));
    }
    let dim = index.dim();
    if clauses.vectors.is_empty() || dim == 0 || (weight == 0.0 && ranked == 0) {
        return Ok(Vec::new());
    }
    let count = clauses.vectors.len() / dim;
    if clauses.texts.len() != count {
        return Err(Error::invalid(format!(
            "{} clause texts for {count} clause vectors",
            clauses.texts.len()
        )));
    }
    let mut long: Vec<usize> = Vec::new();
    if weight > 0.0 {
        long = (0..count)
            .filter(|&i| clauses.texts[i].split_whitespace().count() >= CLAUSE_FUSION_MIN_WORDS)
            .collect();
        if long.len() < 2 {
            long.clear();
        }
    }
    let ranked = ranked.min(count);
    let scored: Vec<usize> =
        (0..count).filter(|&i| i < ranked || long.binary_search(&i).is_ok()).collect();
    if scored.is_empty() {
        return Ok(Vec::new());
    }
    // One pass over the matrix scores every clause (bitwise as a scan of each would).
    let vectors: Vec<f32> =
        scored.iter().flat_map(|&i| &clauses.vectors[i * dim..(i + 1) * dim]).copied().collect();
    let cosines = index.scores_batch(&vectors)?;
    let mut best = if long.is_empty() { Vec::new() } else { vec![f32::NEG_INFINITY; fused.len()] };
    let mut kept = Vec::with_capacity(ranked);
    let n = fused.len();
    for (j, &i) in scored.iter().enumerate() {
        let cosine = &cosines[j * n..(j + 1) * n];
        let sparse = bm25.scores(clauses.texts[i]);
        let clause = fusion::fuse(cosine, &sparse, alpha, method)?;
        if long.binary_search(&i).is_ok() {
            for (best, &score) in best.iter_mut().zip(&clause) {
                *best = best.max(score);
            }
        }
        if i < ranked {
            kept.push(ClauseScores { cosine: cosine.to_vec(), sparse, fused: clause });
        }
    }
    for (fused, best) in fused.iter_mut().zip(best) {
        *fused += weight * best;
    }
    Ok(kept)
}

/// What the whole query's scan learns about each row for the clause rankings: whether a
/// clause may rank it (eligible, not forced for its own sake, within `rankable`), and the
/// eligible rows that are forced for their own sake, which every clause ranking places above
/// its own rows (near copies are compared with them).
pub(super) struct ClauseRows {
    rankable: Vec<bool>,
    forced: Vec<u32>,
}

impl ClauseRows {
    /// For `n` rows (0: no clause is ranked).
    pub(super) fn new(n: usize) -> Self {
        Self { rankable: vec![false; n], forced: Vec::new() }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.rankable.is_empty()
    }

    /// Records an eligible `row`.
    pub(super) fn mark(&mut self, row: usize, forced: bool, in_rankable: bool) {
        if forced {
            self.forced.push(row as u32);
        } else {
            self.rankable[row] = in_rankable;
        }
    }
}

/// One clause's ranking from its `scores`: the best [`Ranking::clause_k`] of the rows it may
/// rank whose clause cosine meets `floor`, near copies moved down as in the whole query's.
pub(super) fn rank_clause(
    index: &Index,
    bm25: &Bm25Index,
    scores: &ClauseScores,
    rows: &ClauseRows,
    request: &Ranking<'_>,
    floor: f32,
) -> Vec<RoutedRow> {
    let k = request.clause_k;
    let pool = if request.near_copy_cosine.is_some() { k.saturating_mul(2) } else { k };
    let mut top = TopK::new(pool);
    for (row, (&rankable, &cosine)) in rows.rankable.iter().zip(&scores.cosine).enumerate() {
        if rankable && cosine >= floor {
            top.push(row as u32, scores.fused[row]);
        }
    }
    let routed = |row: u32| RoutedRow {
        row,
        fused: scores.fused[row as usize],
        dense: scores.cosine[row as usize],
        sparse: scores.sparse[row as usize],
        copy_of: None,
    };
    let ranked: Vec<RoutedRow> = top.into_sorted().into_iter().map(|hit| routed(hit.row)).collect();
    let Some(cosine) = request.near_copy_cosine else {
        return ranked;
    };
    let mut forced: Vec<RoutedRow> = rows.forced.iter().map(|&row| routed(row)).collect();
    forced.sort_by(|a, b| b.fused.total_cmp(&a.fused).then(a.row.cmp(&b.row)));
    defer_near_copies(index, bm25, &forced, ranked, k, cosine)
}
