//! BM25 against its formula, its per-field caps, name terms, exposed names and bad input.

use super::*;

fn doc(name: &str, description: &str, params: &str, server: &str) -> ToolDocument {
    ToolDocument {
        name: name.into(),
        description: description.into(),
        param_text: params.into(),
        server: server.into(),
    }
}

fn corpus() -> Vec<ToolDocument> {
    vec![
        doc("get_weather", "Current weather for a city", "city name of the city", "wx"),
        doc("send_message", "Send a Slack message to a channel", "channel text", "slack"),
        doc("listIssues", "List issues in a GitHub repository", "owner repo state", "github"),
        doc("search", "Search the web", "query", "web"),
    ]
}

#[test]
fn scores_match_the_formula() {
    let docs = corpus();
    let params = Bm25Params::default();
    let index = Bm25Index::build(&docs, params).unwrap();
    let scores = index.scores("weather in the city");
    // Weighted lengths: 3 per name term plus one per description, parameter and server
    // term; `listIssues` and `GitHub` each add their whole word as a third term. Row 0 holds `weather` (name 3 + description 1) and `city` (description 1 +
    // params 2).
    let lens = [
        3.0 * 2.0 + 3.0 + 3.0 + 1.0,
        6.0 + 4.0 + 2.0 + 1.0,
        3.0 * 3.0 + 6.0 + 3.0 + 1.0,
        3.0 + 2.0 + 1.0 + 1.0f64,
    ];
    let avg = lens.iter().sum::<f64>() / 4.0;
    let idf = (1.0 + (4.0 - 1.0 + 0.5) / 1.5f64).ln();
    let part = |tf: f64| idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * lens[0] / avg));
    let want = part(4.0) + part(3.0);
    assert!((f64::from(scores[0]) - want).abs() < 1e-5, "{} vs {want}", scores[0]);
    assert_eq!(&scores[1..], &[0.0, 0.0, 0.0]);
}

#[test]
fn a_term_counts_at_most_twice_per_field_but_every_occurrence_adds_length() {
    let docs = [
        doc("alpha", "issue issue issue issue", "", ""),
        doc("bravo", "issue issue branch branch", "", ""),
        doc("delta", "issue issue", "", ""),
    ];
    let scores = Bm25Index::build(&docs, Bm25Params::default()).unwrap().scores("issue");
    assert_eq!(scores[0], scores[1]);
    assert!(scores[2] > scores[0], "{scores:?}");
    // The name's third `issue` adds length, not frequency.
    let docs = [doc("issue_issue_issue", "issue", "", ""), doc("issue_issue", "issue", "", "")];
    let scores = Bm25Index::build(&docs, Bm25Params::default()).unwrap().scores("issue");
    assert!(scores[1] > scores[0], "{scores:?}");
}

#[test]
fn repeated_query_terms_count_once() {
    let index = Bm25Index::build(&corpus(), Bm25Params::default()).unwrap();
    assert_eq!(index.scores("slack"), index.scores("slack slack Slack"));
}

#[test]
fn name_terms_cover_server_and_name() {
    let index = Bm25Index::build(&corpus(), Bm25Params::default()).unwrap();
    assert_eq!(index.name_has_term("slack").unwrap(), [1]);
    assert_eq!(index.name_has_term("issue").unwrap(), [2]);
    assert_eq!(index.name_has_term("ListIssues").unwrap(), [2]);
    assert_eq!(index.name_has_term("weather_list").unwrap(), Vec::<u32>::new());
    assert!(index.name_has_term("--").is_err());
}

#[test]
fn exposed_names_are_checked_and_looked_up() {
    let index = Bm25Index::build(&corpus(), Bm25Params::default()).unwrap();
    let index = index.with_exposed_names(&[(3, "web__search")]).unwrap();
    assert_eq!(index.mentioned_names("then web__search, please"), [3]);
    assert_eq!(index.rows_named("WEB__SEARCH"), [3]);
    let index = index.with_exposed_names(&[]).unwrap();
    assert_eq!(index.rows_named("web__search"), Vec::<u32>::new());
    let err = |exposed: &[(u32, &str)]| {
        let index = Bm25Index::build(&corpus(), Bm25Params::default()).unwrap();
        index.with_exposed_names(exposed).unwrap_err().to_string()
    };
    assert!(err(&[(4, "x")]).contains("exposed name of row 4"));
    assert!(err(&[(1, "x"), (1, "y")]).contains("row 1 has two exposed names"));
    assert!(err(&[(2, " ")]).contains("row 2 has an empty exposed name"));
}

#[test]
fn rejects_bad_input() {
    let params = Bm25Params { b: 1.5, ..Bm25Params::default() };
    assert!(Bm25Index::build(&corpus(), params).is_err());
    assert!(Bm25Index::build(&[doc(" ", "", "", "")], Bm25Params::default()).is_err());
    let empty = Bm25Index::build(&[], Bm25Params::default()).unwrap();
    assert!(empty.scores("anything").is_empty());
}

#[cfg(unix)]
#[test]
fn a_saved_index_is_for_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bm25.tgb");
    Bm25Index::build(&corpus(), Bm25Params::default()).unwrap().save(&path).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
}
