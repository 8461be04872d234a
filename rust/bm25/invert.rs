//! Turning analysed documents into a sorted vocabulary and its postings lists.

use std::collections::HashMap;

use super::table::{RowLists, StrTable};
use crate::error::{Error, Result};

/// Hands out dense ids to terms in order of first appearance.
#[derive(Debug, Default)]
pub(super) struct Interner {
    ids: HashMap<String, u32>,
    terms: Vec<String>,
}

impl Interner {
    /// The id of `term`, assigning the next one if it is new.
    pub(super) fn id(&mut self, term: &str) -> u32 {
        if let Some(&id) = self.ids.get(term) {
            return id;
        }
        let id = u32::try_from(self.terms.len()).expect("fewer than 2^32 distinct terms");
        self.ids.insert(term.to_owned(), id);
        self.terms.push(term.to_owned());
        id
    }
}

/// One document's `(term id, weight)` occurrences merged into one pair per term, ascending
/// by id. The sort is stable, so each term's weights add up in text order and the sums are
/// identical on every run.
pub(super) fn merge_occurrences(mut occurrences: Vec<(u32, f32)>) -> Vec<(u32, f32)> {
    occurrences.sort_by_key(|&(id, _)| id);
    let mut merged: Vec<(u32, f32)> = Vec::with_capacity(occurrences.len());
    for (id, weight) in occurrences {
        match merged.last_mut() {
            Some(last) if last.0 == id => last.1 += weight,
            _ => merged.push((id, weight)),
        }
    }
    merged
}

/// The inverted form: sorted vocabulary, one postings list per term (rows ascending), and
/// the weight of each posting.
pub(super) struct Inverted {
    pub(super) terms: StrTable,
    pub(super) lists: RowLists,
    pub(super) weights: Vec<f32>,
}

/// Inverts documents given as merged `(term id, weight)` lists, in row order.
pub(super) fn invert(interner: Interner, docs: &[Vec<(u32, f32)>]) -> Result<Inverted> {
    let n_terms = interner.terms.len();
    let total: usize = docs.iter().map(Vec::len).sum();
    u32::try_from(total).map_err(|_| Error::invalid("more than 2^32 postings in one index"))?;
    u32::try_from(docs.len()).map_err(|_| Error::invalid("more than 2^32 documents"))?;

    // Vocabulary order: term ids renumbered so the strings are sorted.
    let mut by_string: Vec<u32> = (0..n_terms as u32).collect();
    by_string
        .sort_unstable_by(|&a, &b| interner.terms[a as usize].cmp(&interner.terms[b as usize]));
    let mut rank = vec![0u32; n_terms];
    for (sorted, &id) in by_string.iter().enumerate() {
        rank[id as usize] = sorted as u32;
    }

    let mut offsets = vec![0u32; n_terms + 1];
    for &(id, _) in docs.iter().flatten() {
        offsets[rank[id as usize] as usize + 1] += 1;
    }
    for i in 0..n_terms {
        offsets[i + 1] += offsets[i];
    }
    let mut cursor: Vec<u32> = offsets[..n_terms].to_vec();
    let mut rows = vec![0u32; total];
    let mut weights = vec![0f32; total];
    // Rows are visited in order, so each list fills in ascending row order.
    for (row, doc) in docs.iter().enumerate() {
        for &(id, weight) in doc {
            let slot = &mut cursor[rank[id as usize] as usize];
            rows[*slot as usize] = row as u32;
            weights[*slot as usize] = weight;
            *slot += 1;
        }
    }
    let terms =
        StrTable::from_strs(by_string.iter().map(|&id| interner.terms[id as usize].as_str()));
    Ok(Inverted { terms, lists: RowLists { offsets, rows }, weights })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverts_into_sorted_terms_and_ascending_rows() {
        let mut interner = Interner::default();
        let doc0 = merge_occurrences(vec![(interner.id("zeta"), 1.0), (interner.id("alpha"), 2.0)]);
        let doc1 = merge_occurrences(vec![
            (interner.id("alpha"), 1.0),
            (interner.id("alpha"), 0.5),
            (interner.id("mid"), 3.0),
        ]);
        let inverted = invert(interner, &[doc0, doc1]).unwrap();
        assert_eq!(inverted.terms, StrTable::from_strs(["alpha", "mid", "zeta"]));
        assert_eq!(inverted.lists.offsets, [0, 2, 3, 4]);
        assert_eq!(inverted.lists.rows, [0, 1, 1, 0]);
        assert_eq!(inverted.weights, [2.0, 1.5, 3.0, 1.0]);
    }
}
