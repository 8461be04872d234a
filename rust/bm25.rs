//! BM25 over tool names, descriptions and parameter text.
//!
//! Each tool is one document with four fields: its name, its description, the text of its
//! parameters (names and descriptions) and its server. Fields are analysed by
//! [`crate::tokenize`] and combined BM25F-style: a term's frequency in a document is the
//! field-weighted sum `tf = Σ_f w_f · min(count_f, 2)` ([`MAX_FIELD_COUNT`]), and the
//! document length is the weighted length `len = Σ_f w_f · terms_f`. With `avg` the mean `len`, `N` documents and `df` the
//! number of documents containing the term, a document scores
//!
//! ```text
//! Σ over distinct query terms t:  idf(t) · tf·(k1 + 1) / (tf + k1·(1 − b + b·len/avg))
//! idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5))
//! ```
//!
//! Each distinct query term counts once, however often the query repeats it. The idf form
//! is Lucene's, which never goes negative for common terms.
//!
//! Besides scores, the index answers exact-name questions through hash look-ups: rows
//! named `x` ([`Bm25Index::rows_named`]), tool names mentioned verbatim in a query
//! ([`Bm25Index::mentioned_names`]), and rows whose id (`server/name`) contains a term
//! ([`Bm25Index::name_has_term`], ToolSearch's `+term`). The first two also know the tools'
//! exposed names once given ([`Bm25Index::with_exposed_names`]); those are the catalog's and
//! are not written to the file.

mod file;
mod invert;
mod names;
mod table;

use std::collections::HashMap;

pub use file::VERSION as FILE_VERSION;

use crate::error::{Error, Result};
use crate::tokenize::{analyze, analyze_keep_stop_words};
use invert::{invert, merge_occurrences, Interner};
use names::NameLookup;
use table::{RowLists, StrTable};

/// One tool as BM25 sees it. Only `name` is required; the other fields may be empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolDocument {
    /// The tool's name, e.g. `get_weather` or `createIssue`.
    pub name: String,
    /// The tool's description.
    pub description: String,
    /// Parameter names and their descriptions, as one text.
    pub param_text: String,
    /// The server (or namespace) that provides the tool; `server/name` is the tool's id.
    pub server: String,
}

/// How much one occurrence of a term counts in each field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FieldWeights {
    /// The tool name.
    pub name: f32,
    /// The description.
    pub description: f32,
    /// Parameter names and descriptions.
    pub params: f32,
    /// The server name.
    pub server: f32,
}

impl Default for FieldWeights {
    /// A name term counts three times a description term: names are short and chosen with care.
    fn default() -> Self {
        Self { name: 3.0, description: 1.0, params: 1.0, server: 1.0 }
    }
}

/// BM25 parameters: `k1` (term-frequency saturation), `b` (length normalisation) and the
/// field weights.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25Params {
    /// Term-frequency saturation, `>= 0`; 0 makes a document's score ignore repetitions.
    pub k1: f32,
    /// Length normalisation in `[0, 1]`; 0 ignores document length.
    pub b: f32,
    /// Per-field weights.
    pub weights: FieldWeights,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Self { k1: 1.2, b: 0.75, weights: FieldWeights::default() }
    }
}

impl Bm25Params {
    /// Checks every parameter is in range; the error names the first one that is not.
    pub fn validate(&self) -> Result<()> {
        if !(self.k1.is_finite() && self.k1 >= 0.0) {
            return Err(Error::invalid(format!("k1 must be finite and >= 0, got {}", self.k1)));
        }
        if !(0.0..=1.0).contains(&self.b) {
            return Err(Error::invalid(format!("b must be in [0, 1], got {}", self.b)));
        }
        let w = self.weights;
        for (field, weight) in
            [("name", w.name), ("description", w.description), ("params", w.params)]
                .into_iter()
                .chain([("server", w.server)])
        {
            if !(weight.is_finite() && weight >= 0.0) {
                return Err(Error::invalid(format!(
                    "field weight {field:?} must be finite and >= 0, got {weight}"
                )));
            }
        }
        if w.name + w.description + w.params + w.server <= 0.0 {
            return Err(Error::invalid("at least one field weight must be > 0"));
        }
        Ok(())
    }
}

/// An immutable BM25 index over tool documents. Cheap to share between threads.
#[derive(Debug)]
pub struct Bm25Index {
    params: Bm25Params,
    names: StrTable,
    servers: StrTable,
    /// Sorted vocabulary; term `i` owns postings list `i`.
    terms: StrTable,
    postings: RowLists,
    /// Weighted term frequency of each posting, parallel to `postings.rows`.
    term_freqs: Vec<f32>,
    /// Weighted length of each document.
    doc_lens: Vec<f32>,
    /// Sorted terms of the ids (`server/name`), stop words kept; term `i` owns list `i`.
    id_terms: StrTable,
    id_postings: RowLists,
    derived: Derived,
}

/// Values recomputed from the stored ones on build and on load.
#[derive(Debug)]
struct Derived {
    /// `idf(t) · (k1 + 1)` per term.
    idf_k1: Vec<f32>,
    /// `k1 · (1 − b + b·len/avg)` per document.
    len_norms: Vec<f32>,
    lookup: NameLookup,
}

/// Every document's terms as interned `(term id, weight)` lists, plus its weighted length
/// and its id terms.
struct Analysed {
    vocabulary: Interner,
    doc_terms: Vec<Vec<(u32, f32)>>,
    doc_lens: Vec<f32>,
    id_vocabulary: Interner,
    doc_id_terms: Vec<Vec<(u32, f32)>>,
}

/// How many occurrences of a term count in one field. Past a second mention, repeating a
/// term says nothing more about the tool, and a description that repeats its keywords
/// ("issues issues pull requests issues") bids for every request holding them; the
/// occurrences still count in the document's length.
pub const MAX_FIELD_COUNT: u32 = 2;

/// Runs the analyser over every field of every document. Serial on purpose: a thread pool
/// started here would not survive a `fork()` of the host process (pre-forking servers), and
/// one pass is quick even at large N (docs/design.md, "BM25").
fn analyse(docs: &[ToolDocument], w: &FieldWeights) -> Analysed {
    let mut out = Analysed {
        vocabulary: Interner::default(),
        doc_terms: Vec::with_capacity(docs.len()),
        doc_lens: Vec::with_capacity(docs.len()),
        id_vocabulary: Interner::default(),
        doc_id_terms: Vec::with_capacity(docs.len()),
    };
    let mut counts: HashMap<u32, u32> = HashMap::new();
    for doc in docs {
        let mut occurrences = Vec::new();
        let mut length = 0.0f32;
        for (text, weight) in [
            (&doc.name, w.name),
            (&doc.description, w.description),
            (&doc.param_text, w.params),
            (&doc.server, w.server),
        ] {
            if weight > 0.0 {
                counts.clear();
                analyze(text, |term| {
                    *counts.entry(out.vocabulary.id(term)).or_default() += 1;
                    length += weight;
                });
                occurrences.extend(
                    counts
                        .iter()
                        .map(|(&id, &count)| (id, weight * count.min(MAX_FIELD_COUNT) as f32)),
                );
            }
        }
        out.doc_terms.push(merge_occurrences(occurrences));
        out.doc_lens.push(length);
        let mut id_occurrences = Vec::new();
        for text in [&doc.server, &doc.name] {
            analyze_keep_stop_words(text, |term| {
                id_occurrences.push((out.id_vocabulary.id(term), 1.0));
            });
        }
        out.doc_id_terms.push(merge_occurrences(id_occurrences));
    }
    out
}

impl Bm25Index {
    /// Indexes `docs`; row `i` of every result is `docs[i]`. Fails when a parameter is out of
    /// range or a document has an empty name.
    pub fn build(docs: &[ToolDocument], params: Bm25Params) -> Result<Self> {
        params.validate()?;
        if let Some(row) = docs.iter().position(|d| d.name.trim().is_empty()) {
            return Err(Error::invalid(format!("document {row} has an empty name")));
        }
        let Analysed { vocabulary, doc_terms, doc_lens, id_vocabulary, doc_id_terms } =
            analyse(docs, &params.weights);
        let inverted = invert(vocabulary, &doc_terms)?;
        let id_inverted = invert(id_vocabulary, &doc_id_terms)?;
        Ok(Self::from_parts(
            params,
            StrTable::from_strs(docs.iter().map(|d| d.name.as_str())),
            StrTable::from_strs(docs.iter().map(|d| d.server.as_str())),
            (inverted.terms, inverted.lists, inverted.weights),
            doc_lens,
            (id_inverted.terms, id_inverted.lists),
        ))
    }

    fn from_parts(
        params: Bm25Params,
        names: StrTable,
        servers: StrTable,
        (terms, postings, term_freqs): (StrTable, RowLists, Vec<f32>),
        doc_lens: Vec<f32>,
        (id_terms, id_postings): (StrTable, RowLists),
    ) -> Self {
        let n = doc_lens.len();
        let avg_len = if n == 0 {
            0.0
        } else {
            doc_lens.iter().map(|&l| f64::from(l)).sum::<f64>() / n as f64
        };
        let (k1, b) = (f64::from(params.k1), f64::from(params.b));
        let len_norms = doc_lens
            .iter()
            .map(|&len| {
                let relative = if avg_len > 0.0 { f64::from(len) / avg_len } else { 1.0 };
                (k1 * (1.0 - b + b * relative)) as f32
            })
            .collect();
        let idf_k1 = (0..terms.len())
            .map(|t| {
                let df = postings.range(t).len() as f64;
                ((1.0 + (n as f64 - df + 0.5) / (df + 0.5)).ln() * (k1 + 1.0)) as f32
            })
            .collect();
        let lookup = NameLookup::new(&names, &servers);
        Self {
            params,
            names,
            servers,
            terms,
            postings,
            term_freqs,
            doc_lens,
            id_terms,
            id_postings,
            derived: Derived { idf_k1, len_norms, lookup },
        }
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the index holds no document.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The parameters the index was built with.
    pub fn params(&self) -> Bm25Params {
        self.params
    }

    /// The tool name of `row`. Panics when `row >= len()`.
    pub fn name(&self, row: usize) -> &str {
        self.names.get(row)
    }

    /// The server of `row`. Panics when `row >= len()`.
    pub fn server(&self, row: usize) -> &str {
        self.servers.get(row)
    }

    /// Number of distinct terms in the vocabulary.
    pub fn vocabulary_len(&self) -> usize {
        self.terms.len()
    }

    /// BM25 score of every document for `query`, zero where no query term occurs.
    pub fn scores(&self, query: &str) -> Vec<f32> {
        let mut out = vec![0.0; self.len()];
        self.add_scores(query, &mut out);
        out
    }

    /// Writes the scores of [`Bm25Index::scores`] into `out`, which must hold `len()` values.
    pub fn scores_into(&self, query: &str, out: &mut [f32]) -> Result<()> {
        if out.len() != self.len() {
            return Err(Error::invalid(format!(
                "output holds {} values, the index has {} documents",
                out.len(),
                self.len()
            )));
        }
        out.fill(0.0);
        self.add_scores(query, out);
        Ok(())
    }

    fn add_scores(&self, query: &str, out: &mut [f32]) {
        let Derived { idf_k1, len_norms, .. } = &self.derived;
        for term in self.query_terms(query) {
            let range = self.postings.range(term);
            let weight = idf_k1[term];
            for (&row, &tf) in self.postings.rows[range.clone()].iter().zip(&self.term_freqs[range])
            {
                let row = row as usize;
                out[row] += weight * tf / (tf + len_norms[row]);
            }
        }
    }

    /// Vocabulary ids of the distinct analysed terms of `query` that occur in some document.
    fn query_terms(&self, query: &str) -> Vec<usize> {
        let mut ids = Vec::new();
        analyze(query, |term| ids.extend(self.terms.find_sorted(term)));
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Rows whose id (`server/name`) contains every analysed term of `term` (stop words
    /// kept, stemmed as everywhere): `+slack` finds the `slack/...` tools and
    /// `post_message`-style names containing `slack`. Ascending. Fails when `term` has no
    /// letter or digit.
    pub fn name_has_term(&self, term: &str) -> Result<Vec<u32>> {
        let mut wanted = Vec::new();
        analyze_keep_stop_words(term, |t| wanted.push(t.to_owned()));
        if wanted.is_empty() {
            return Err(Error::invalid(format!("name term {term:?} has no letter or digit")));
        }
        let mut rows: Option<Vec<u32>> = None;
        for t in &wanted {
            let Some(id) = self.id_terms.find_sorted(t) else { return Ok(Vec::new()) };
            let list = self.id_postings.list(id);
            rows = Some(match rows {
                None => list.to_vec(),
                Some(previous) => {
                    previous.into_iter().filter(|r| list.binary_search(r).is_ok()).collect()
                }
            });
        }
        Ok(rows.unwrap_or_default())
    }

    /// The index with the tools' exposed names (`(row, name)`: the name the model sees, where
    /// the catalog renamed the tool), which [`Bm25Index::rows_named`] and
    /// [`Bm25Index::mentioned_names`] then know too, replacing any given before. Fails on a
    /// row out of range, a row given twice or an empty name.
    pub fn with_exposed_names(mut self, exposed: &[(u32, &str)]) -> Result<Self> {
        let mut rows: Vec<u32> = exposed.iter().map(|&(row, _)| row).collect();
        rows.sort_unstable();
        if let Some(&row) = rows.last().filter(|&&row| row as usize >= self.len()) {
            return Err(Error::invalid(format!(
                "exposed name of row {row}, but the index has {} documents",
                self.len()
            )));
        }
        if let Some(pair) = rows.windows(2).find(|pair| pair[0] == pair[1]) {
            return Err(Error::invalid(format!("row {} has two exposed names", pair[0])));
        }
        if let Some(&(row, _)) = exposed.iter().find(|(_, name)| name.trim().is_empty()) {
            return Err(Error::invalid(format!("row {row} has an empty exposed name")));
        }
        self.derived.lookup.set_exposed(exposed, &self.names);
        Ok(self)
    }

    /// Rows `name` names, ascending: the row whose exposed name (the model's name for it)
    /// equals `name`; if none, equals it ignoring case; if none, the rows whose tool name or
    /// `server/name` id equals `name`; if none, equals it ignoring case.
    pub fn rows_named(&self, name: &str) -> Vec<u32> {
        self.derived.lookup.rows_named(name, &self.names, &self.servers)
    }

    /// Rows whose name, id or exposed name the query mentions verbatim (ignoring case,
    /// delimited by whitespace or punctuation): `"call get_weather for Paris"` finds
    /// `get_weather`. Inside a longer query only compound names (`get_weather`, `math.sum`,
    /// `listIssues`), ids and exposed names count, since a one-word name like `search` is
    /// ordinary English; a query that is exactly a name (`"search"`) finds it whatever its
    /// form. Ascending; cost independent
    /// of `len()`.
    pub fn mentioned_names(&self, query: &str) -> Vec<u32> {
        self.derived.lookup.mentioned(query, &self.names, &self.servers)
    }
}

#[cfg(test)]
mod tests;
