//! One routing pass in one call: dense scores, BM25, fusion, gating and top-k.
//!
//! The router calls this once per turn with the GIL released, so the O(N) work of a route
//! never touches Python objects. ToolSearch's `select:` is the same call in another
//! [`RouteMode`]: the named rows through the gate, nothing scanned.
//!
//! Routing reads the index's scan scores ([`Index::scores`]), at its storage precision: for an
//! int8 or bf16 index each cosine is within [`Index::score_error_bound`] of the exact f32 one.
//! Unlike [`Index::search`], which re-scores its candidates in f32 and so returns the exact
//! top-k whatever the storage, routing ranks on the compact scores as they are: fusion needs
//! every row's cosine, and the rows it returns, their order and the `dense` it reports are
//! those of the compact copy.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use crate::bm25::Bm25Index;
use crate::error::{Error, Result};
use crate::fusion::{self, FusionMethod};
use crate::gating::{Gate, RowSet, Verdict};
use crate::index::{Index, GATED_REPORT_LEN};
use crate::tokenize::{name_coverage, term_set};
use crate::topk::{top_k, TopK};

mod clauses;
use clauses::{rank_clause, ClauseRows};
pub use clauses::{score_clauses, ClauseFusion, ClauseScores, CLAUSE_FUSION_MIN_WORDS};

/// What to route: the rows that must come along, and how the others are chosen.
#[derive(Debug, Clone, Copy)]
pub struct RouteRequest<'a> {
    /// Rows included whenever eligible, whatever their score: tools named in the query,
    /// included by the caller, pinned.
    pub forced: &'a [u32],
    /// How the rows besides `forced` are chosen.
    pub mode: RouteMode<'a>,
}

/// How a [`RouteRequest`] chooses rows.
#[derive(Debug, Clone, Copy)]
pub enum RouteMode<'a> {
    /// Rank every eligible row by the query; `forced` rows come first, best fused score first.
    Rank(Ranking<'a>),
    /// ToolSearch's `select:`: the eligible `forced` rows alone, in the order given (each
    /// once), every score 0. Nothing is scanned: only the gate is asked.
    Select,
}

/// A query and how to rank rows by it.
#[derive(Debug, Clone, Copy)]
pub struct Ranking<'a> {
    /// The query embedding (normalised by the index before scoring).
    pub vector: &'a [f32],
    /// Clause vectors of a multi-intent query, back to back (none: empty).
    pub clauses: &'a [f32],
    /// Weight of a row's best clause cosine, added to its whole-query cosine in the dense
    /// signal that is fused; 0 leaves the whole-query cosine alone.
    pub clause_weight: f32,
    /// Each clause's text, aligned with `clauses` (may be empty when `clause_fusion` and
    /// `clause_k` are 0).
    pub clause_texts: &'a [&'a str],
    /// Weight of a row's best score over the query's long clauses, each fused on its own,
    /// added to its fused score ([`score_clauses`]); 0 turns it off.
    pub clause_fusion: f32,
    /// Each of the first [`MAX_RANKED_CLAUSES`] clauses is ranked on its own as well, as a
    /// query of its vector and text alone would be (the same gate, scope, floor, forced and
    /// rankable rows, demotion and near copies; no clause signal of its own): its best
    /// `clause_k` rows come back in [`RouteOutcome::clauses`]. 0: no clause is ranked.
    pub clause_k: usize,
    /// Rows reported among the forced ones whatever their score, as `forced` rows are, for
    /// the caller to place by a score of its own (rows lifted by learned memory); each
    /// clause's ranking ranks them as any other row.
    pub lifted: &'a [u32],
    /// The query text BM25 ranks by.
    pub text: &'a str,
    /// Weight of the dense signal in the fused score, in `[0, 1]`.
    pub alpha: f32,
    /// How the two signals are normalised and combined.
    pub method: FusionMethod,
    /// At most this many ranked rows (`forced` rows come on top of them).
    pub k: usize,
    /// Minimum dense (cosine) score of a ranked row: the Tool Attention paper's ISO threshold.
    /// It applies to the cosine, not the fused score, because min-max fusion is relative to
    /// the query's best rows and so cannot tell "nothing fits" apart from "this fits best".
    pub threshold: Option<f32>,
    /// The only rows that may be ranked (ToolSearch's `+term` filter: the rows whose id holds
    /// the terms); `None`: every row. Forced rows stay in whatever it says. A row in scope
    /// but outside it is left out of the outcome altogether: neither ranked, nor gated, nor
    /// out of scope, which counts the gate's allow and deny sets only.
    pub rankable: Option<&'a [u32]>,
    /// A ranked row with the same tool name as a row placed above it (forced, or ranked and
    /// kept), and whose stored vector has at least this cosine with that row's, is a near
    /// copy of that tool: it is moved below the rows that are not and score at least
    /// [`COPY_SCORE_SHARE`] of its score (the best `2k` are ranked for it), so `k` rows show
    /// more different tools. `None` ranks by fused score alone.
    pub near_copy_cosine: Option<f32>,
    /// Rows whose fused score is multiplied by `demote_weight` before ranking: tools whose
    /// descriptions address the model ("always use this tool first") rather than describe
    /// the tool, bidding for every route. Forced rows keep their place whatever it says.
    pub demoted: &'a [u32],
    /// The factor, in `[0, 1]`, on a demoted row's fused score; 1 leaves it alone.
    pub demote_weight: f32,
    /// Weight of a ranked row's name coverage (the share of its name's words the query holds,
    /// [`name_coverage`]) in the order of the best `2k` rows; 0 ranks by fused score alone.
    /// See [`order_by_name`].
    pub name_weight: f32,
}

/// One routed row with the evidence for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoutedRow {
    /// Row number in the index.
    pub row: u32,
    /// Fused score.
    pub fused: f32,
    /// Whole-query cosine similarity at the index's storage precision.
    pub dense: f32,
    /// BM25 score.
    pub sparse: f32,
    /// The row placed above that this ranked row nearly copies (see
    /// [`Ranking::near_copy_cosine`]).
    pub copy_of: Option<u32>,
}

impl RoutedRow {
    /// `row` with every score 0, as [`RouteMode::Select`] reports it.
    fn unscored(row: u32) -> Self {
        Self { row, fused: 0.0, dense: 0.0, sparse: 0.0, copy_of: None }
    }
}

/// The outcome of [`route`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteOutcome {
    /// Eligible forced rows: best fused score first when ranking, in the request's order
    /// for [`RouteMode::Select`].
    pub forced: Vec<RoutedRow>,
    /// The best `k` other eligible rows whose cosine meets the threshold, best first (fused
    /// score descending, then row ascending, unless [`Ranking::name_weight`] reorders them),
    /// each near copy moved below the other rows that score at least [`COPY_SCORE_SHARE`] of
    /// its score.
    pub ranked: Vec<RoutedRow>,
    /// Rows in scope but gated out by missing flags (of the forced rows alone for
    /// [`RouteMode::Select`]).
    pub n_gated: usize,
    /// Rows outside the gate's allow set or inside its deny set.
    pub n_out_of_scope: usize,
    /// The best (up to [`GATED_REPORT_LEN`]) rows gated out by missing flags that would
    /// otherwise have been forced or ranked among the active rows, with the flags they miss.
    pub gated: Vec<(RoutedRow, Vec<u32>)>,
    /// Each ranked clause's best [`Ranking::clause_k`] rows, clause by clause, ranked as
    /// `ranked` is but by the clause's own scores (which its rows report); empty when no
    /// clause is ranked.
    pub clauses: Vec<Vec<RoutedRow>>,
}

/// Most clauses of one query ranked on their own ([`Ranking::clause_k`]); a query of more is
/// a list of arguments more often than of intents.
pub const MAX_RANKED_CLAUSES: usize = 16;

/// Routes one request over `index` and `bm25`, which must describe the same rows in the same
/// order, through `gate`.
pub fn route(
    index: &Index,
    bm25: &Bm25Index,
    request: &RouteRequest<'_>,
    gate: &Gate<'_>,
) -> Result<RouteOutcome> {
    let n = index.len();
    if bm25.len() != n {
        return Err(Error::invalid(format!(
            "the BM25 index has {} documents but the embedding index has {n} rows",
            bm25.len()
        )));
    }
    if let Some(&row) = request.forced.iter().find(|&&row| row as usize >= n) {
        return Err(Error::invalid(format!("forced row {row} is out of range for {n} rows")));
    }
    match &request.mode {
        RouteMode::Rank(ranking) => rank(index, bm25, request.forced, ranking, gate),
        RouteMode::Select => Ok(select(request.forced, gate)),
    }
}

/// [`RouteMode::Select`]: `forced` through the gate, in order.
fn select(forced: &[u32], gate: &Gate<'_>) -> RouteOutcome {
    let mut outcome = RouteOutcome { n_out_of_scope: gate.n_out_of_scope(), ..Default::default() };
    let mut seen = HashSet::with_capacity(forced.len());
    let mut gated = Vec::new();
    for &row in forced.iter().filter(|&&row| seen.insert(row)) {
        match gate.verdict(row as usize) {
            Verdict::OutOfScope => {}
            Verdict::MissingFlags => gated.push(row),
            Verdict::Eligible => outcome.forced.push(RoutedRow::unscored(row)),
        }
    }
    outcome.n_gated = gated.len();
    // Every score ties at 0, so the report keeps the lowest rows, as a ranking's would.
    gated.sort_unstable();
    gated.truncate(GATED_REPORT_LEN);
    outcome.gated = gated
        .into_iter()
        .map(|row| (RoutedRow::unscored(row), gate.missing_flags(row as usize)))
        .collect();
    outcome
}

/// [`RouteMode::Rank`]: every row scored, fused, gated and ranked.
fn rank(
    index: &Index,
    bm25: &Bm25Index,
    forced: &[u32],
    request: &Ranking<'_>,
    gate: &Gate<'_>,
) -> Result<RouteOutcome> {
    check_ranking(index, request)?;
    let rankable = request.rankable.map(|rows| RowSet::new(index.len(), rows, "rankable"));
    let rankable = rankable.transpose()?;
    let dense = index.scores(request.vector)?;
    let sparse = bm25.scores(request.text);
    let signal = dense_signal(index, &dense, request.clauses, request.clause_weight)?;
    let mut fused = fusion::fuse(&signal, &sparse, request.alpha, request.method)?;
    let clauses = ClauseFusion {
        vectors: request.clauses,
        texts: request.clause_texts,
        weight: request.clause_fusion,
    };
    let ranked_clauses = if request.clause_k == 0 { 0 } else { MAX_RANKED_CLAUSES };
    let (alpha, method) = (request.alpha, request.method);
    let mut clause_scores =
        score_clauses(index, bm25, &clauses, ranked_clauses, alpha, method, &mut fused)?;
    // Each row once: a row listed twice is still one demoted tool.
    let mut demoted = request.demoted.to_vec();
    demoted.sort_unstable();
    demoted.dedup();
    for &row in &demoted {
        fused[row as usize] = lowered(fused[row as usize], request.demote_weight);
        for clause in &mut clause_scores {
            clause.fused[row as usize] = lowered(clause.fused[row as usize], request.demote_weight);
        }
    }
    let routed = |row: u32| RoutedRow {
        row,
        fused: fused[row as usize],
        dense: dense[row as usize],
        sparse: sparse[row as usize],
        copy_of: None,
    };

    let own = sorted_rows(forced.iter());
    let forced = sorted_rows(forced.iter().chain(request.lifted));
    let is_forced = |row: usize| forced.binary_search(&(row as u32)).is_ok();
    let floor = request.threshold.unwrap_or(f32::NEG_INFINITY);

    let mut outcome = RouteOutcome::default();
    // Near copies are moved down and rows whose names the query holds up: the best 2k leave
    // room for k different tools and for the rows that move.
    let widen = request.near_copy_cosine.is_some() || request.name_weight > 0.0;
    let pool = if widen { request.k.saturating_mul(2) } else { request.k };
    let mut ranked = TopK::new(pool);
    // Gated rows that would have been forced are kept apart: they belong in the report
    // whatever the cut, and stronger gated rows under the cut must not push them out of it.
    let mut gated = TopK::new(GATED_REPORT_LEN);
    let mut gated_forced = TopK::new(GATED_REPORT_LEN);
    // The rows each clause may rank, and the eligible rows forced for their own sake.
    let mut clause_rows = ClauseRows::new(if clause_scores.is_empty() { 0 } else { fused.len() });
    // An open gate (no masks, no scopes) admits every row: skip the per-row checks.
    let open = gate.is_open();
    for (row, &score) in fused.iter().enumerate() {
        let relevant = dense[row] >= floor;
        let verdict = if open { Verdict::Eligible } else { gate.verdict(row) };
        let in_rankable = rankable.as_ref().is_none_or(|rows| rows.contains(row));
        if !clause_rows.is_empty() && verdict == Verdict::Eligible {
            clause_rows.mark(row, own.binary_search(&(row as u32)).is_ok(), in_rankable);
        }
        if !in_rankable && verdict != Verdict::OutOfScope && !is_forced(row) {
            continue;
        }
        match verdict {
            Verdict::OutOfScope => outcome.n_out_of_scope += 1,
            Verdict::MissingFlags => {
                outcome.n_gated += 1;
                if is_forced(row) {
                    gated_forced.push(row as u32, score);
                } else if relevant {
                    gated.push(row as u32, score);
                }
            }
            Verdict::Eligible if !forced.is_empty() && is_forced(row) => {
                outcome.forced.push(routed(row as u32));
            }
            Verdict::Eligible if relevant => ranked.push(row as u32, score),
            Verdict::Eligible => {}
        }
    }
    outcome.forced.sort_by(|a, b| b.fused.total_cmp(&a.fused).then(a.row.cmp(&b.row)));
    outcome.ranked = ranked.into_sorted().into_iter().map(|hit| routed(hit.row)).collect();
    if request.name_weight > 0.0 {
        order_by_name(bm25, &mut outcome.ranked, request.text, request.name_weight);
    }
    if let Some(cosine) = request.near_copy_cosine {
        let ranked = std::mem::take(&mut outcome.ranked);
        let forced = &outcome.forced;
        outcome.ranked = defer_near_copies(index, bm25, forced, ranked, request.k, cosine);
    }
    outcome.ranked.truncate(request.k);
    // Report only the gated rows that the gate actually displaced: those that would have been
    // forced, or ranked at least as high as the lowest active row that is not a near copy
    // (copies are placed by their own rule, not by score).
    let lowest = outcome.ranked.iter().filter(|r| r.copy_of.is_none()).map(|r| r.fused);
    let cutoff = match lowest.min_by(f32::total_cmp) {
        Some(lowest) if outcome.ranked.len() == request.k => lowest,
        _ => f32::NEG_INFINITY,
    };
    for hit in gated.into_sorted().into_iter().filter(|hit| hit.score >= cutoff) {
        gated_forced.push(hit.row, hit.score);
    }
    outcome.gated = gated_forced
        .into_sorted()
        .into_iter()
        .map(|hit| (routed(hit.row), gate.missing_flags(hit.row as usize)))
        .collect();
    outcome.clauses = clause_scores
        .iter()
        .map(|scores| rank_clause(index, bm25, scores, &clause_rows, request, floor))
        .collect();
    Ok(outcome)
}

/// The checks of a ranking's settings that scoring does not make itself.
/// `score` demoted by `weight` in `[0, 1]`: `weight * score` for a score of at least 0, and as
/// far below a negative one (`divmax` and raw fusion can give those, where a product would
/// raise it).
fn lowered(score: f32, weight: f32) -> f32 {
    score - (1.0 - weight) * score.abs()
}

fn check_ranking(index: &Index, request: &Ranking<'_>) -> Result<()> {
    if request.k == 0 {
        return Err(Error::invalid("k must be at least 1"));
    }
    if let Some(threshold) = request.threshold.filter(|t| !t.is_finite()) {
        // A NaN floor would compare false against every row and route nothing, silently.
        return Err(Error::invalid(format!("threshold must be finite, got {threshold}")));
    }
    if let Some(cosine) = request.near_copy_cosine.filter(|c| !c.is_finite()) {
        return Err(Error::invalid(format!("near_copy_cosine must be finite, got {cosine}")));
    }
    if !(request.name_weight.is_finite() && request.name_weight >= 0.0) {
        return Err(Error::invalid(format!(
            "name_weight must be finite and >= 0, got {}",
            request.name_weight
        )));
    }
    if !(0.0..=1.0).contains(&request.demote_weight) {
        return Err(Error::invalid(format!(
            "demote_weight must be in [0, 1], got {}",
            request.demote_weight
        )));
    }
    for (rows, what) in [(request.demoted, "demoted"), (request.lifted, "lifted")] {
        if let Some(&row) = rows.iter().find(|&&row| row as usize >= index.len()) {
            return Err(Error::invalid(format!(
                "{what} row {row} is out of range for {} rows",
                index.len()
            )));
        }
    }
    Ok(())
}

/// `rows` sorted, each once, for binary search.
fn sorted_rows<'r>(rows: impl Iterator<Item = &'r u32>) -> Vec<u32> {
    let mut rows: Vec<u32> = rows.copied().collect();
    rows.sort_unstable();
    rows.dedup();
    rows
}

/// How much a place further down weighs against a row in [`order_by_name`]: `ln(1 + place)`
/// times this is taken from its order key. Without it a row of any place could jump to the
/// top on its name alone; with it a fully covered name moves a row past close scores near the
/// head and past larger gaps further down, where places are cheaper (ln 2 - ln 1 is 0.69,
/// ln 10 - ln 9 is 0.11).
pub const NAME_PLACE_WEIGHT: f32 = 0.65;

/// Reorders `ranked` (best fused score first) by `fused + weight * coverage -
/// NAME_PLACE_WEIGHT * ln(1 + place)`, where coverage is the share of the row's tool name
/// that the query `text` holds ([`name_coverage`]) and place its position in `ranked` from 0.
/// Ties keep the fused order. Each row keeps its own fused score, so the result need not be
/// sorted by it.
///
/// A request often names what it wants in the words of the tool's name ("create an issue",
/// "the current weather"), and the fused score, spread over the whole description, weighs
/// those words as any others. Fitted on BFCL and MetaTool as a pairwise logistic model over
/// the fused score, the coverage and the log place (docs/design.md, "Name words").
fn order_by_name(bm25: &Bm25Index, ranked: &mut Vec<RoutedRow>, text: &str, weight: f32) {
    let query = term_set(text);
    if query.is_empty() {
        return;
    }
    let mut keyed: Vec<(f32, RoutedRow)> = ranked
        .iter()
        .enumerate()
        .map(|(place, row)| {
            let coverage = name_coverage(bm25.name(row.row as usize), &query);
            let prior = NAME_PLACE_WEIGHT * (place as f32).ln_1p();
            (row.fused + weight * coverage - prior, *row)
        })
        .collect();
    keyed.sort_by(|a, b| b.0.total_cmp(&a.0)); // stable: ties keep the fused order
    ranked.clear();
    ranked.extend(keyed.into_iter().map(|(_, row)| row));
}

/// How far below [`Ranking::near_copy_cosine`] a cosine may fall and still meet it: two
/// copies of one row come out at 0.99999994, not 1.
const COSINE_SLACK: f32 = 1e-5;

/// A near copy is moved below the different tools that score at least this share of its
/// fused score, not below all of them: a strong copy stays above a tool that barely fits.
pub const COPY_SCORE_SHARE: f32 = 0.5;

/// The first `k` of `ranked` (best first) once each near copy of a row placed above it (a
/// `forced` row, or a ranked row kept before it) has been moved below the other rows that
/// score at least [`COPY_SCORE_SHARE`] of its score, marked with the row it copies. A near
/// copy has the same tool name (in `bm25`) and a stored f32 vector with a cosine of at least
/// `cosine` with the other's; no row moves up.
///
/// Catalogs repeat tools: one server configured twice, a tool and its copy in a sibling
/// server. Each copy takes a place a different tool could have had, and tells the model
/// nothing new. The name must match too: tools of one family (`create_issue`,
/// `update_issue`) with long shared parameter lists can embed as close as copies do, and
/// are different tools. BFCL's merged catalog repeats functions across its categories, and
/// moving its copies down ranks it better (docs/design.md, "Near copies move down").
fn defer_near_copies(
    index: &Index,
    bm25: &Bm25Index,
    forced: &[RoutedRow],
    ranked: Vec<RoutedRow>,
    k: usize,
    cosine: f32,
) -> Vec<RoutedRow> {
    let floor = cosine - COSINE_SLACK;
    // The rows placed so far, by tool name: a row is compared only with those of its name.
    let mut shown: HashMap<&str, Vec<u32>> = HashMap::new();
    for row in forced {
        shown.entry(bm25.name(row.row as usize)).or_default().push(row.row);
    }
    let mut distinct = Vec::with_capacity(k.min(ranked.len()));
    let mut copies = Vec::new();
    for mut row in ranked {
        if distinct.len() == k {
            break; // every row below is ranked after these k, so it would come after them
        }
        let same_name = shown.entry(bm25.name(row.row as usize)).or_default();
        match same_name.iter().find(|&&above| index.row_cosine(row.row, above) >= floor) {
            Some(&above) => {
                row.copy_of = Some(above);
                copies.push(row);
            }
            None => {
                same_name.push(row.row);
                distinct.push(row);
            }
        }
    }
    // Copies come in rank order, so each one's bar is no higher than the one before it.
    let bar = |copy: &RoutedRow| copy.fused - (1.0 - COPY_SCORE_SHARE) * copy.fused.abs();
    let mut placed = Vec::with_capacity(distinct.len() + copies.len());
    let mut copies = copies.into_iter().peekable();
    for row in distinct {
        while let Some(copy) = copies.next_if(|copy| row.fused < bar(copy)) {
            placed.push(copy);
        }
        placed.push(row);
    }
    placed.extend(copies);
    placed.truncate(k);
    placed
}

/// How many rows, nearest the whole query, get their best clause cosine in the dense signal.
///
/// A tool that fits one intent of a multi-intent query is also near the query as a whole, so
/// the clause cosines only matter near the top. Scoring just these rows ([`Index::scores_at`])
/// is cheap where scanning every row once per clause is not (a query may have many clauses),
/// and on the dev sets it ranked as all rows did. They are scored at storage precision: an
/// int8 scan leaves their f32 rows out of cache. The figures: docs/design.md, "Clause vectors
/// for multi-intent queries".
pub const CLAUSE_CANDIDATES: usize = 200;

/// The dense signal [`route`] fuses, from every row's whole-query `cosine`, the query's
/// `clauses` (vectors back to back) and `weight`: for the [`CLAUSE_CANDIDATES`] rows nearest
/// the whole query, the cosine plus `weight` times the row's best clause cosine (both at the
/// index's storage precision); for the other rows, `1 + weight` times the cosine, their signal
/// had the query been a single clause. A row that fits one intent of a multi-intent query well
/// gains over one that fits the blend of all intents vaguely. Without clauses, or at weight 0,
/// the cosine itself.
pub fn dense_signal<'d>(
    index: &Index,
    cosine: &'d [f32],
    clauses: &[f32],
    weight: f32,
) -> Result<Cow<'d, [f32]>> {
    if !(weight.is_finite() && weight >= 0.0) {
        return Err(Error::invalid(format!("clause_weight must be finite and >= 0, got {weight}")));
    }
    let dim = index.dim();
    if !clauses.len().is_multiple_of(dim) {
        return Err(Error::invalid(format!(
            "clauses hold {} values, not a whole number of {dim}-dimension vectors",
            clauses.len()
        )));
    }
    if cosine.len() != index.len() {
        return Err(Error::invalid(format!(
            "{} cosines for an index of {} rows",
            cosine.len(),
            index.len()
        )));
    }
    if clauses.is_empty() || weight == 0.0 || cosine.is_empty() {
        // Fusion checks the signal it is given; checking here too would scan every row twice.
        return Ok(Cow::Borrowed(cosine));
    }
    // The nearest rows are chosen by cosine, so a NaN would leave them undefined.
    fusion::check_finite(cosine, "cosine")?;
    let candidates: Vec<u32> =
        top_k(cosine, CLAUSE_CANDIDATES, None, |_| true).into_iter().map(|(row, _)| row).collect();
    let scores = index.scores_at(clauses, &candidates)?;
    let mut best = vec![f32::NEG_INFINITY; candidates.len()];
    for clause in scores.chunks_exact(candidates.len()) {
        for (best, &score) in best.iter_mut().zip(clause) {
            *best = best.max(score);
        }
    }
    let mut signal: Vec<f32> = cosine.iter().map(|&c| (1.0 + weight) * c).collect();
    for (&row, best) in candidates.iter().zip(best) {
        signal[row as usize] = cosine[row as usize] + weight * best;
    }
    Ok(Cow::Owned(signal))
}

#[cfg(test)]
mod tests;
