//! The routing pass against hand-built indexes: each mode, gate and signal on rows whose
//! expected order can be read off the vectors.

use super::*;
use crate::bm25::{Bm25Params, ToolDocument};
use crate::index::BuildOptions;
use crate::matrix_file::{Dtype, OpenOptions};

/// An f32 index of 4-d `vectors` in `dir`, with one mask word per row when `masks` is
/// not empty.
fn index_4d(dir: &std::path::Path, vectors: &[f32], masks: &[u64]) -> Index {
    let path = dir.join("m.tgm");
    let mask_words = usize::from(!masks.is_empty());
    let options =
        BuildOptions { dtype: Dtype::F32, model_id: "test", ids: None, masks, mask_words };
    Index::build(&path, vectors, 4, &options).unwrap();
    Index::open(&path, OpenOptions::default(), 1).unwrap()
}

/// A tool of server "s" without parameters.
fn doc(name: &str, description: &str) -> ToolDocument {
    ToolDocument {
        name: name.into(),
        description: description.into(),
        param_text: String::new(),
        server: "s".into(),
    }
}

/// Four tools on the axes of a 4-d space; tool 2 requires flag 0.
fn fixture(dir: &std::path::Path) -> (Index, Bm25Index) {
    let vectors: Vec<f32> =
        (0..4).flat_map(|row| (0..4).map(move |col| f32::from(u8::from(row == col)))).collect();
    let index = index_4d(dir, &vectors, &[0, 0, 1, 0]);
    let docs = [
        doc("read_file", "read a file"),
        doc("write_file", "write a file"),
        doc("delete_file", "delete a file"),
        doc("list_dir", "list a directory"),
    ];
    (index, Bm25Index::build(&docs, Bm25Params::default()).unwrap())
}

/// A request ranking by `vector` and `text`, with `forced` rows: the best 2, min-max over
/// every row, both signals weighed alike.
fn request<'a>(vector: &'a [f32], text: &'a str, forced: &'a [u32]) -> RouteRequest<'a> {
    let ranking = Ranking {
        vector,
        clauses: &[],
        clause_weight: 0.0,
        clause_texts: &[],
        clause_fusion: 0.0,
        text,
        alpha: 0.5,
        method: FusionMethod::min_max(0),
        k: 2,
        threshold: None,
        rankable: None,
        near_copy_cosine: None,
        demoted: &[],
        demote_weight: 1.0,
    };
    RouteRequest { forced, mode: RouteMode::Rank(ranking) }
}

/// The ranking settings of `request`, to change one.
fn ranking<'r, 'a>(request: &'r mut RouteRequest<'a>) -> &'r mut Ranking<'a> {
    match &mut request.mode {
        RouteMode::Rank(ranking) => ranking,
        RouteMode::Select => panic!("a select request has no ranking"),
    }
}

#[test]
fn ranks_by_fused_score_and_reports_the_displaced_gated_row() {
    let dir = tempfile::tempdir().unwrap();
    let (index, bm25) = fixture(dir.path());
    let gate = index.gate(&[], None, None).unwrap();
    let vector = [0.0, 0.1, 1.0, 0.0];
    let outcome = route(&index, &bm25, &request(&vector, "delete file", &[]), &gate).unwrap();
    assert_eq!(outcome.n_gated, 1);
    assert_eq!(outcome.gated.len(), 1);
    assert_eq!(outcome.gated[0].0.row, 2);
    assert_eq!(outcome.gated[0].1, vec![0]);
    assert!(outcome.ranked.iter().all(|r| r.row != 2));
    assert_eq!(outcome.ranked.len(), 2);

    let unlocked = index.gate(&[0], None, None).unwrap();
    let outcome = route(&index, &bm25, &request(&vector, "delete file", &[]), &unlocked).unwrap();
    assert_eq!(outcome.ranked[0].row, 2);
    assert!(outcome.gated.is_empty());
}

#[test]
fn clause_vectors_lift_the_rows_of_each_intent_over_the_blend() {
    let dir = tempfile::tempdir().unwrap();
    let (index, bm25) = fixture(dir.path());
    let gate = index.gate(&[], None, None).unwrap();
    // The whole query sits nearest row 3; its two clauses are rows 0 and 1 exactly.
    let vector = [0.5, 0.5, 0.0, 0.7];
    let clauses = [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0];
    let mut req = request(&vector, "", &[]);
    ranking(&mut req).clauses = &clauses;
    let rows = |req: &RouteRequest<'_>| -> Vec<u32> {
        let outcome = route(&index, &bm25, req, &gate).unwrap();
        outcome.ranked.iter().map(|r| r.row).collect()
    };
    assert_eq!(rows(&req)[0], 3, "weight 0 ignores the clauses");
    ranking(&mut req).clause_weight = 1.0;
    assert_eq!(rows(&req), [0, 1]);
    let outcome = route(&index, &bm25, &req, &gate).unwrap();
    let whole = 0.5 / (0.5f32 * 0.5 + 0.5 * 0.5 + 0.7 * 0.7).sqrt();
    assert!((outcome.ranked[0].dense - whole).abs() < 1e-6, "dense stays the whole cosine");

    ranking(&mut req).clauses = &clauses[..3];
    let err = route(&index, &bm25, &req, &gate).unwrap_err().to_string();
    assert!(err.contains("clauses hold 3 values"), "{err}");
    ranking(&mut req).clauses = &clauses;
    ranking(&mut req).clause_weight = f32::NAN;
    let err = route(&index, &bm25, &req, &gate).unwrap_err().to_string();
    assert!(err.contains("clause_weight"), "{err}");
}

#[test]
fn each_long_clause_fused_on_its_own_brings_in_the_second_intents_tool() {
    let dir = tempfile::tempdir().unwrap();
    let (index, bm25) = fixture(dir.path());
    let gate = index.gate(&[], None, None).unwrap();
    // Two intents: read a file (row 0), then write one (row 1). The vectors lean to row 3,
    // as a model may; only the second clause's words name row 1 clearly.
    let first = "read the file from the local disk";
    let second = "then write the whole report to a file";
    let text = format!("{first}, {second}");
    let vector = [0.8, 0.0, 0.0, 0.6];
    let clauses = [1.0, 0.0, 0.0, 0.0, 0.0, 0.7, 0.0, 0.714];
    let texts = [first, second];
    let mut req = request(&vector, &text, &[]);
    let ranked = ranking(&mut req);
    (ranked.alpha, ranked.clauses, ranked.clause_weight, ranked.clause_texts) =
        (0.8, &clauses, 1.0, &texts);
    let rows = |req: &RouteRequest<'_>| -> Vec<u32> {
        let outcome = route(&index, &bm25, req, &gate).unwrap();
        outcome.ranked.iter().map(|r| r.row).collect()
    };
    assert!(!rows(&req).contains(&1), "off at weight 0: {:?}", rows(&req));
    ranking(&mut req).clause_fusion = 0.5;
    assert!(rows(&req).contains(&1), "{:?}", rows(&req));

    // Fragments under the word minimum are not fused on their own.
    let short = ["read the file", "then write it"];
    ranking(&mut req).clause_texts = &short;
    assert!(!rows(&req).contains(&1), "{:?}", rows(&req));

    ranking(&mut req).clause_texts = &texts[..1];
    let err = route(&index, &bm25, &req, &gate).unwrap_err().to_string();
    assert!(err.contains("1 clause texts for 2 clause vectors"), "{err}");
    ranking(&mut req).clause_texts = &texts;
    ranking(&mut req).clause_fusion = -1.0;
    let err = route(&index, &bm25, &req, &gate).unwrap_err().to_string();
    assert!(err.contains("clause_fusion"), "{err}");
}

#[test]
fn only_the_rows_nearest_the_query_get_a_clause_bonus() {
    let dir = tempfile::tempdir().unwrap();
    // Row i at angle i/1000 from the query's axis, so cosines fall with i; every row also
    // leans towards the clause's axis.
    let n = CLAUSE_CANDIDATES + 50;
    let vectors: Vec<f32> = (0..n)
        .flat_map(|i| {
            let angle = i as f32 / 1000.0;
            [angle.cos(), angle.sin(), 0.3, 0.0]
        })
        .collect();
    let index = index_4d(dir.path(), &vectors, &[]);
    let cosine = index.scores(&[1.0, 0.0, 0.0, 0.0]).unwrap();
    let clause = [0.0, 0.0, 1.0, 0.0];
    let signal = dense_signal(&index, &cosine, &clause, 0.5).unwrap();
    let clause_cosine = index.scores_at(&clause, &[0, n as u32 - 1]).unwrap();
    assert_eq!(signal[0], cosine[0] + 0.5 * clause_cosine[0]);
    assert_eq!(signal[n - 1], 1.5 * cosine[n - 1], "outside the candidates");
    assert_ne!(signal[n - 1], cosine[n - 1] + 0.5 * clause_cosine[1]);
    assert!(matches!(dense_signal(&index, &cosine, &[], 0.5).unwrap(), Cow::Borrowed(_)));
    assert!(matches!(dense_signal(&index, &cosine, &clause, 0.0).unwrap(), Cow::Borrowed(_)));
    let err = dense_signal(&index, &cosine[1..], &clause, 0.5).unwrap_err().to_string();
    assert!(err.contains("cosines for an index of"), "{err}");
    let nan = vec![f32::NAN; n];
    let err = dense_signal(&index, &nan, &clause, 0.5).unwrap_err().to_string();
    assert!(err.contains("cosine[0] is NaN"), "{err}");
}

#[test]
fn forced_rows_come_apart_and_threshold_cuts_ranked_rows() {
    let dir = tempfile::tempdir().unwrap();
    let (index, bm25) = fixture(dir.path());
    let gate = index.gate(&[], None, None).unwrap();
    let vector = [1.0, 0.0, 0.0, 0.0];
    let mut req = request(&vector, "read", &[3]);
    ranking(&mut req).threshold = Some(0.99);
    let outcome = route(&index, &bm25, &req, &gate).unwrap();
    assert_eq!(outcome.forced.iter().map(|r| r.row).collect::<Vec<_>>(), vec![3]);
    assert_eq!(outcome.ranked.iter().map(|r| r.row).collect::<Vec<_>>(), vec![0]);
}

/// Row 1 a near copy of row 0 (same name, nearly the same vector); row 2 as near to row 0
/// under another name; row 3 half-way to the query; row 4 away from it.
fn copies_fixture(dir: &std::path::Path) -> (Index, Bm25Index) {
    let vectors = [
        1.0, 0.0, 0.0, 0.0, //
        0.999, 0.045, 0.0, 0.0, //
        0.998, 0.06, 0.0, 0.0, //
        0.6, 0.8, 0.0, 0.0, //
        0.0, 0.0, 1.0, 0.0,
    ];
    let index = index_4d(dir, &vectors, &[]);
    let names = ["read_file", "read_file", "read_files", "tool_3", "tool_4"];
    let docs: Vec<ToolDocument> = names.iter().map(|name| doc(name, "")).collect();
    (index, Bm25Index::build(&docs, Bm25Params::default()).unwrap())
}

#[test]
fn a_near_copy_goes_below_the_rows_that_score_half_as_well() {
    let dir = tempfile::tempdir().unwrap();
    let (index, bm25) = copies_fixture(dir.path());
    let gate = index.gate(&[], None, None).unwrap();
    let vector = [1.0, 0.0, 0.0, 0.0];
    let mut req = request(&vector, "", &[]);
    ranking(&mut req).k = 5;
    let order = |req: &RouteRequest<'_>| -> Vec<(u32, Option<u32>)> {
        let outcome = route(&index, &bm25, req, &gate).unwrap();
        outcome.ranked.iter().map(|r| (r.row, r.copy_of)).collect()
    };
    assert_eq!(order(&req), [(0, None), (1, None), (2, None), (3, None), (4, None)]);
    ranking(&mut req).near_copy_cosine = Some(0.95);
    // Fused scores about 0.5, 0.4995, 0.499, 0.3 and 0: the copy passes below row 2 (a
    // different tool, being named differently) and row 3 (over half its score), not
    // below row 4.
    assert_eq!(order(&req), [(0, None), (2, None), (3, None), (1, Some(0)), (4, None)]);
    ranking(&mut req).k = 3;
    assert_eq!(order(&req), [(0, None), (2, None), (3, None)]);
    // Copies of a forced row go down too; the forced row is not ranked.
    ranking(&mut req).k = 4;
    req.forced = &[0];
    assert_eq!(order(&req), [(2, None), (3, None), (1, Some(0)), (4, None)]);
    // Any k: the rows there are, once each.
    ranking(&mut req).k = usize::MAX;
    assert_eq!(order(&req), [(2, None), (3, None), (1, Some(0)), (4, None)]);
    ranking(&mut req).k = 4;
    // A cosine over the pair's keeps them apart.
    ranking(&mut req).near_copy_cosine = Some(0.9999);
    assert_eq!(order(&req), [(1, None), (2, None), (3, None), (4, None)]);
    ranking(&mut req).near_copy_cosine = Some(f32::NAN);
    let err = route(&index, &bm25, &req, &gate).unwrap_err().to_string();
    assert!(err.contains("near_copy_cosine must be finite"), "{err}");
}

#[test]
fn demoted_rows_are_weighed_down_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let (index, bm25) = fixture(dir.path());
    let gate = index.gate(&[0], None, None).unwrap();
    let vector = [0.2, 1.0, 0.9, 0.0];
    let rows = |req: &RouteRequest<'_>| {
        let outcome = route(&index, &bm25, req, &gate).unwrap();
        let forced = outcome.forced.iter().map(|r| (r.row, r.fused));
        forced.chain(outcome.ranked.iter().map(|r| (r.row, r.fused))).collect::<Vec<_>>()
    };
    let mut req = request(&vector, "write file", &[]);
    let plain = rows(&req);
    assert_eq!(plain.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2]);
    ranking(&mut req).demoted = &[1];
    ranking(&mut req).demote_weight = 0.5;
    let demoted = rows(&req);
    assert_eq!(demoted.iter().map(|r| r.0).collect::<Vec<_>>(), [2, 1]);
    assert!((demoted[1].1 - 0.5 * plain[0].1).abs() < 1e-6, "{demoted:?} {plain:?}");
    // A forced row is included whatever its weight.
    let mut forced = request(&vector, "write file", &[1]);
    ranking(&mut forced).demoted = &[1];
    ranking(&mut forced).demote_weight = 0.0;
    assert_eq!(rows(&forced)[0].0, 1);
    ranking(&mut req).demote_weight = 1.5;
    let err = route(&index, &bm25, &req, &gate).unwrap_err().to_string();
    assert!(err.contains("demote_weight must be in [0, 1]"), "{err}");
    ranking(&mut req).demote_weight = 0.5;
    ranking(&mut req).demoted = &[7];
    let err = route(&index, &bm25, &req, &gate).unwrap_err().to_string();
    assert!(err.contains("demoted row 7 is out of range"), "{err}");
}

#[test]
fn mismatched_indexes_and_bad_rows_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (index, _) = fixture(dir.path());
    let small = Bm25Index::build(
        &[ToolDocument {
            name: "x".into(),
            description: String::new(),
            param_text: String::new(),
            server: String::new(),
        }],
        Bm25Params::default(),
    )
    .unwrap();
    let gate = index.gate(&[], None, None).unwrap();
    let vector = [1.0, 0.0, 0.0, 0.0];
    assert!(route(&index, &small, &request(&vector, "x", &[]), &gate).is_err());
    let (index, bm25) = fixture(dir.path());
    assert!(route(&index, &bm25, &request(&vector, "x", &[9]), &gate).is_err());
    let mut nan_floor = request(&vector, "x", &[]);
    ranking(&mut nan_floor).threshold = Some(f32::NAN);
    let err = route(&index, &bm25, &nan_floor, &gate).unwrap_err().to_string();
    assert!(err.contains("threshold must be finite"), "{err}");
}

#[test]
fn rankable_rows_filter_the_ranking_but_not_forced_rows_or_the_scope_count() {
    let dir = tempfile::tempdir().unwrap();
    let (index, bm25) = fixture(dir.path());
    let gate = index.gate(&[], None, Some(&[1])).unwrap();
    let vector = [1.0, 0.5, 0.5, 0.0];
    let mut req = request(&vector, "file", &[3]);
    ranking(&mut req).rankable = Some(&[0, 2]);
    let outcome = route(&index, &bm25, &req, &gate).unwrap();
    assert_eq!(outcome.forced.iter().map(|r| r.row).collect::<Vec<_>>(), [3]);
    assert_eq!(outcome.ranked.iter().map(|r| r.row).collect::<Vec<_>>(), [0]);
    assert_eq!((outcome.n_gated, outcome.n_out_of_scope), (1, 1));
    // A gated row the filter leaves out is not reported at all; a denied one still counts.
    ranking(&mut req).rankable = Some(&[0]);
    let outcome = route(&index, &bm25, &req, &gate).unwrap();
    assert_eq!((outcome.n_gated, outcome.n_out_of_scope), (0, 1));
    assert!(outcome.gated.is_empty());
    ranking(&mut req).rankable = Some(&[9]);
    let err = route(&index, &bm25, &req, &gate).unwrap_err().to_string();
    assert!(err.contains("rankable contains row 9"), "{err}");
}

#[test]
fn select_passes_the_forced_rows_through_the_gate_in_order_unscored() {
    let dir = tempfile::tempdir().unwrap();
    let (index, bm25) = fixture(dir.path());
    let gate = index.gate(&[], Some(&[0, 2, 3]), Some(&[0])).unwrap();
    let select = |forced: &[u32], gate: &Gate<'_>| {
        route(&index, &bm25, &RouteRequest { forced, mode: RouteMode::Select }, gate)
    };
    let outcome = select(&[3, 2, 0, 3], &gate).unwrap();
    assert_eq!(outcome.forced, [RoutedRow::unscored(3)]);
    assert!(outcome.ranked.is_empty());
    assert_eq!(outcome.gated, [(RoutedRow::unscored(2), vec![0])]);
    // Row 1 is outside the allow set and row 0 in the deny set, selected or not.
    assert_eq!((outcome.n_gated, outcome.n_out_of_scope), (1, 2));
    let open = index.gate(&[0], None, None).unwrap();
    let rows = |outcome: RouteOutcome| outcome.forced.iter().map(|r| r.row).collect::<Vec<_>>();
    assert_eq!(rows(select(&[2, 0, 1], &open).unwrap()), [2, 0, 1]);
    let err = select(&[4], &open).unwrap_err().to_string();
    assert!(err.contains("forced row 4 is out of range"), "{err}");
}
