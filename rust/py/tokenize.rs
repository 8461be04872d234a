//! `analyze_text`: the analyser BM25 indexes with, for tests that check what it makes of a
//! text.

use pyo3::prelude::*;

use crate::tokenize;

/// The terms BM25 indexes for `text`: split at separators, case and digit changes, CJK runs
/// as character pairs, lower-cased, stop words dropped (unless `keep_stop_words`), words
/// stemmed (English Snowball).
#[pyfunction]
#[pyo3(signature = (text, *, keep_stop_words = false))]
fn analyze_text(text: &str, keep_stop_words: bool) -> Vec<String> {
    let mut terms = Vec::new();
    if keep_stop_words {
        tokenize::analyze_keep_stop_words(text, |t| terms.push(t.to_owned()));
    } else {
        tokenize::analyze(text, |t| terms.push(t.to_owned()));
    }
    terms
}

/// Adds `analyze_text` to `m` (the private `_testing` module).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(analyze_text, m)?)
}
