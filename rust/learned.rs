//! Learned rows: the query vectors a router's feedback said each tool served, and the vote
//! of the stored queries nearest a new one.
//!
//! A router that learns from use lifts a tool for requests like those it served before. At
//! route time every stored query is scored against the new one, so the rows are kept as int8
//! with a per-row scale and scanned by the same kernels as the index ([`crate::kernels`]):
//! ten thousand learned rows cost a fraction of the index's own scan.

use crate::error::{Error, Result};
use crate::kernels::scan_i8;
use crate::matrix_file::MAX_DIM;
use crate::quantize::to_int8;

/// One tool's share of the nearest stored queries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Vote {
    /// The tool (a row of the router's index).
    pub tool: u32,
    /// Sum over the tool's rows among the nearest of `weight * cosine`.
    pub vote: f32,
    /// The best cosine of the tool's rows among the nearest.
    pub best: f32,
}

/// Stored query vectors, each for one tool with a weight, in insertion order.
#[derive(Debug, Clone)]
pub struct LearnedRows {
    dim: usize,
    codes: Vec<i8>,
    scales: Vec<f32>,
    tools: Vec<u32>,
    weights: Vec<f32>,
}

impl LearnedRows {
    /// No rows, of `dim` values each.
    ///
    /// # Errors
    /// If `dim` is 0 or past [`MAX_DIM`], which no index holds: the rows are queries of one.
    pub fn new(dim: usize) -> Result<Self> {
        if dim == 0 || dim > MAX_DIM {
            return Err(Error::invalid(format!(
                "learned rows need a dimension in 1..={MAX_DIM}, got {dim}"
            )));
        }
        Ok(Self {
            dim,
            codes: Vec::new(),
            scales: Vec::new(),
            tools: Vec::new(),
            weights: Vec::new(),
        })
    }

    /// Values per row.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Rows held.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether no row is held.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The tool of each row, in order.
    pub fn tools(&self) -> &[u32] {
        &self.tools
    }

    /// The weight of each row, in order.
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    /// Appends one row per tool in `tools`: `vectors` holds them back to back, L2-normalised
    /// by the caller (the cosine is the plain dot product), each with its `weights` entry.
    ///
    /// # Errors
    /// On lengths that do not match, or a value or weight that is not finite.
    pub fn push(&mut self, vectors: &[f32], tools: &[u32], weights: &[f32]) -> Result<()> {
        if Some(vectors.len()) != tools.len().checked_mul(self.dim) || weights.len() != tools.len()
        {
            return Err(Error::invalid(format!(
                "{} tools, {} weights and {} values do not make rows of {} values",
                tools.len(),
                weights.len(),
                vectors.len(),
                self.dim
            )));
        }
        if !vectors.iter().chain(weights).all(|x| x.is_finite()) {
            return Err(Error::invalid("learned vectors and weights must be finite"));
        }
        let quantized = to_int8(vectors, self.dim);
        self.codes.extend_from_slice(&quantized.codes);
        self.scales.extend_from_slice(&quantized.scales);
        self.tools.extend_from_slice(tools);
        self.weights.extend_from_slice(weights);
        Ok(())
    }

    /// Sets row `row`'s weight.
    ///
    /// # Errors
    /// If there is no such row or the weight is not finite.
    pub fn set_weight(&mut self, row: usize, weight: f32) -> Result<()> {
        if !weight.is_finite() {
            return Err(Error::invalid("a learned weight must be finite"));
        }
        let slot = self.weights.get_mut(row).ok_or_else(|| {
            Error::invalid(format!("no learned row {row} (of {})", self.tools.len()))
        })?;
        *slot = weight;
        Ok(())
    }

    /// Keeps the rows whose `keep` entry is true, in order (eviction and forgetting).
    ///
    /// # Errors
    /// If `keep` does not hold one entry per row.
    pub fn retain(&mut self, keep: &[bool]) -> Result<()> {
        if keep.len() != self.len() {
            return Err(Error::invalid(format!(
                "keep holds {} entries for {} rows",
                keep.len(),
                self.len()
            )));
        }
        let dim = self.dim;
        let mut at = 0;
        for (row, &kept) in keep.iter().enumerate() {
            if kept {
                self.codes.copy_within(row * dim..(row + 1) * dim, at * dim);
                self.scales[at] = self.scales[row];
                self.tools[at] = self.tools[row];
                self.weights[at] = self.weights[row];
                at += 1;
            }
        }
        self.codes.truncate(at * dim);
        self.scales.truncate(at);
        self.tools.truncate(at);
        self.weights.truncate(at);
        Ok(())
    }

    /// Every row's cosine with `query` (at int8 precision), in row order.
    ///
    /// # Errors
    /// If `query` does not have `dim` values, or one is NaN or infinite: it would score NaN
    /// against every row, and [`Self::votes`] would drop them all without a word.
    pub fn scores(&self, query: &[f32]) -> Result<Vec<f32>> {
        if query.len() != self.dim {
            return Err(Error::invalid(format!(
                "query has {} values, learned rows have {}",
                query.len(),
                self.dim
            )));
        }
        if let Some(at) = query.iter().position(|x| !x.is_finite()) {
            return Err(Error::invalid(format!(
                "query holds {} at position {at}; queries must be finite",
                query[at]
            )));
        }
        let mut out = vec![0f32; self.len()];
        scan_i8(query, &self.codes, self.dim, &self.scales, &mut out);
        Ok(out)
    }

    /// The votes of the `neighbours` stored rows nearest `query` whose cosine is at least
    /// `floor`, grouped by tool, largest vote first.
    ///
    /// A kNN vote rather than the best match alone: a tool that served several requests like
    /// this one has more evidence than one that served a single one.
    ///
    /// # Errors
    /// As [`Self::scores`].
    pub fn votes(&self, query: &[f32], neighbours: usize, floor: f32) -> Result<Vec<Vote>> {
        let scores = self.scores(query)?;
        let mut near: Vec<(usize, f32)> =
            scores.into_iter().enumerate().filter(|&(_, s)| s >= floor).collect();
        let by_score = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if near.len() > neighbours {
            if neighbours == 0 {
                return Ok(Vec::new());
            }
            near.select_nth_unstable_by(neighbours - 1, by_score);
            near.truncate(neighbours);
        }
        let mut votes: Vec<Vote> = Vec::new();
        for (row, score) in near {
            let (tool, weight) = (self.tools[row], self.weights[row]);
            match votes.iter_mut().find(|v| v.tool == tool) {
                Some(vote) => {
                    vote.vote += weight * score;
                    vote.best = vote.best.max(score);
                }
                None => votes.push(Vote { tool, vote: weight * score, best: score }),
            }
        }
        votes.sort_by(|a, b| b.vote.total_cmp(&a.vote).then(a.tool.cmp(&b.tool)));
        Ok(votes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(values: &[f32]) -> Vec<f32> {
        let norm = values.iter().map(|x| x * x).sum::<f32>().sqrt();
        values.iter().map(|x| x / norm).collect()
    }

    fn rows() -> LearnedRows {
        let mut rows = LearnedRows::new(3).unwrap();
        let vectors = [unit(&[1.0, 0.0, 0.0]), unit(&[0.9, 0.1, 0.0]), unit(&[0.0, 1.0, 0.0])];
        rows.push(&vectors.concat(), &[7, 7, 2], &[1.0, 2.0, 1.0]).unwrap();
        rows
    }

    #[test]
    fn votes_group_the_nearest_rows_by_tool() {
        let votes = rows().votes(&unit(&[1.0, 0.05, 0.0]), 10, 0.5).unwrap();
        assert_eq!(votes.len(), 1, "the row of tool 2 is below the floor: {votes:?}");
        assert_eq!(votes[0].tool, 7);
        assert!(votes[0].vote > 2.9 && votes[0].vote < 3.0, "{votes:?}");
        assert!(votes[0].best > 0.99);
    }

    #[test]
    fn only_the_nearest_rows_vote() {
        let votes = rows().votes(&unit(&[1.0, 1.0, 0.0]), 1, 0.0).unwrap();
        assert_eq!(votes.len(), 1);
        assert_eq!(votes[0].tool, 7, "row 1 leans to the query most: {votes:?}");
        assert!(rows().votes(&unit(&[1.0, 1.0, 0.0]), 0, 0.0).unwrap().is_empty());
    }

    #[test]
    fn retain_drops_rows_and_keeps_the_order() {
        let mut rows = rows();
        rows.retain(&[true, false, true]).unwrap();
        assert_eq!(rows.tools(), &[7, 2]);
        assert_eq!(rows.weights(), &[1.0, 1.0]);
        let scores = rows.scores(&unit(&[0.0, 1.0, 0.0])).unwrap();
        assert!(scores[0].abs() < 0.01 && (scores[1] - 1.0).abs() < 0.01, "{scores:?}");
        assert!(rows.retain(&[true]).is_err());
    }

    #[test]
    fn bad_input_is_refused() {
        let mut rows = rows();
        assert!(LearnedRows::new(0).is_err());
        assert!(rows.push(&[1.0, 0.0], &[1], &[1.0]).is_err());
        assert!(rows.push(&[f32::NAN, 0.0, 0.0], &[1], &[1.0]).is_err());
        assert!(rows.scores(&[1.0]).is_err());
        assert!(rows.set_weight(9, 1.0).is_err());
        rows.set_weight(0, 4.0).unwrap();
        assert_eq!(rows.weights()[0], 4.0);
    }

    #[test]
    fn a_dimension_no_index_has_is_refused() {
        // At 2^60 values a row, 16 rows of no values passed push's length check (the product
        // wrapped to 0), and retain then sliced past the codes and panicked.
        for dim in [MAX_DIM + 1, 1 << 60] {
            let err = LearnedRows::new(dim).unwrap_err().to_string();
            assert!(err.contains(&format!("1..={MAX_DIM}")), "{err}");
        }
        assert_eq!(LearnedRows::new(MAX_DIM).unwrap().dim(), MAX_DIM);
    }

    #[test]
    fn a_query_that_is_not_finite_is_refused_by_name() {
        // Quantised rows times NaN score NaN, which `votes` would silently drop.
        let rows = rows();
        let err = |query: &[f32]| rows.scores(query).unwrap_err().to_string();
        assert!(err(&[0.0, f32::NAN, 1.0]).contains("query holds NaN at position 1"));
        assert!(err(&[f32::INFINITY, 0.0, 0.0]).contains("query holds inf at position 0"));
        assert!(err(&[0.0, 0.0, f32::NEG_INFINITY]).contains("queries must be finite"));
        let vote = rows.votes(&[f32::NAN, 0.0, 0.0], 10, 0.0).unwrap_err().to_string();
        assert!(vote.contains("query holds NaN at position 0"), "{vote}");
    }
}
