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
        clause_k: 0,
        lifted: &[],
        text,
        alpha: 0.5,
        method: FusionMethod::min_max(0),
        k: 2,
        threshold: None,
        rankable: None,
        near_copy_cosine: None,
        demoted: &[],
        demote_weight: 1.0,
        name_weight: 0.0,
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
    // A row listed twice is demoted once.
    ranking(&mut req).demoted = &[1, 1, 1];
    assert_eq!(rows(&req), demoted);
    ranking(&mut req).demoted = &[1];
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

const CLAUSE_DIM: usize = 8;
const CLAUSE_ROWS: usize = 60;

/// Values in `[-1, 1)` from a fixed linear congruential sequence.
fn noise(seed: u64, count: usize) -> Vec<f32> {
    let mut state = seed;
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            f32::from(u16::try_from(state >> 48).unwrap()) / 32_768.0 - 1.0
        })
        .collect()
}

/// 60 rows of 8-d noise: rows 14, 28, 42 and 56 near copies of the row before (same name);
/// every row `r % 5 == 2` requires flag 0; each row's text two of ten words.
fn clause_fixture(dir: &std::path::Path) -> (Index, Bm25Index) {
    let mut vectors = noise(7, CLAUSE_ROWS * CLAUSE_DIM);
    let mut names: Vec<String> = (0..CLAUSE_ROWS).map(|row| format!("tool_{row}")).collect();
    for row in [14, 28, 42, 56] {
        for col in 0..CLAUSE_DIM {
            vectors[row * CLAUSE_DIM + col] = vectors[(row - 1) * CLAUSE_DIM + col] + 0.001;
        }
        names[row] = names[row - 1].clone();
    }
    let masks: Vec<u64> = (0..CLAUSE_ROWS).map(|row| u64::from(row % 5 == 2)).collect();
    let options = BuildOptions {
        dtype: Dtype::F32,
        model_id: "test",
        ids: None,
        masks: &masks,
        mask_words: 1,
    };
    let path = dir.join("m.tgm");
    Index::build(&path, &vectors, CLAUSE_DIM, &options).unwrap();
    let index = Index::open(&path, OpenOptions::default(), 1).unwrap();
    let words =
        ["read", "write", "file", "issue", "mail", "send", "list", "search", "user", "repo"];
    let docs: Vec<ToolDocument> = (0..CLAUSE_ROWS)
        .map(|row| doc(&names[row], &format!("{} {}", words[row % 10], words[(row / 3) % 10])))
        .collect();
    (index, Bm25Index::build(&docs, Bm25Params::default()).unwrap())
}

/// The row vector of `row` in `clause_fixture`, as a clause vector.
fn fixture_row(row: usize) -> Vec<f32> {
    noise(7, CLAUSE_ROWS * CLAUSE_DIM)[row * CLAUSE_DIM..(row + 1) * CLAUSE_DIM].to_vec()
}

#[test]
fn each_clause_is_ranked_as_a_route_of_its_own_would_rank_it() {
    let dir = tempfile::tempdir().unwrap();
    let (index, bm25) = clause_fixture(dir.path());
    let gate = index.gate(&[], None, Some(&[3])).unwrap();
    // Clause 0 is lifted row 16 itself; clause 1 is row 13, a near copy of row 14 (whose
    // words match the clause's better).
    let mut clauses = fixture_row(16);
    clauses.extend(fixture_row(13));
    clauses.extend(noise(11, CLAUSE_DIM));
    let texts = ["read the file", "send mail to the user", "search the issue in the repo"];
    let vector = noise(5, CLAUSE_DIM);
    let rankable: Vec<u32> = (0..CLAUSE_ROWS as u32).filter(|row| row % 6 != 5).collect();
    let forced = [10];
    let base = Ranking {
        vector: &vector,
        clauses: &clauses,
        clause_weight: 1.0,
        clause_texts: &texts,
        clause_fusion: 0.5,
        clause_k: 3,
        lifted: &[16, 9],
        text: "read the file, send mail to the user, search the issue",
        alpha: 0.65,
        method: FusionMethod::min_max(20),
        k: 5,
        threshold: Some(-0.5),
        rankable: Some(&rankable),
        near_copy_cosine: Some(0.95),
        demoted: &[4, 9],
        demote_weight: 0.5,
        name_weight: 0.0,
    };
    let request = RouteRequest { forced: &forced, mode: RouteMode::Rank(base) };
    let outcome = route(&index, &bm25, &request, &gate).unwrap();
    assert_eq!(outcome.clauses.len(), 3);
    for (i, clause) in outcome.clauses.iter().enumerate() {
        let alone = Ranking {
            vector: &clauses[i * CLAUSE_DIM..(i + 1) * CLAUSE_DIM],
            clauses: &[],
            clause_texts: &[],
            clause_k: 0,
            lifted: &[],
            text: texts[i],
            k: 3,
            ..base
        };
        let request = RouteRequest { forced: &forced, mode: RouteMode::Rank(alone) };
        let expected = route(&index, &bm25, &request, &gate).unwrap().ranked;
        assert_eq!(clause, &expected, "clause {i}");
    }
    // A lifted row is forced in the query's own ranking and ranked in a clause's.
    assert!(outcome.forced.iter().any(|r| r.row == 16));
    assert_eq!(outcome.clauses[0][0].row, 16);
    let rows = |outcome: &RouteOutcome, i: usize| -> Vec<u32> {
        outcome.clauses[i].iter().map(|r| r.row).collect()
    };
    assert_eq!(rows(&outcome, 1)[0], 14);
    assert!(!rows(&outcome, 1).contains(&13), "moved down: {:?}", rows(&outcome, 1));
    let mut copies_kept = request;
    ranking(&mut copies_kept).near_copy_cosine = None;
    let kept = route(&index, &bm25, &copies_kept, &gate).unwrap();
    assert_eq!(rows(&kept, 1), [14, 25, 13]);
    // The query's own rows are those of a route that ranks no clause.
    let mut plain = request;
    ranking(&mut plain).clause_k = 0;
    let unranked = route(&index, &bm25, &plain, &gate).unwrap();
    assert!(unranked.clauses.is_empty());
    assert_eq!((unranked.forced, unranked.ranked), (outcome.forced, outcome.ranked));
}

#[test]
fn only_the_first_clauses_are_ranked_and_each_needs_its_text() {
    let dir = tempfile::tempdir().unwrap();
    let (index, bm25) = clause_fixture(dir.path());
    let gate = index.gate(&[0], None, None).unwrap();
    let count = MAX_RANKED_CLAUSES + 2;
    let clauses = noise(3, count * CLAUSE_DIM);
    let texts = vec!["read"; count];
    let vector = noise(5, CLAUSE_DIM);
    let mut req = request(&vector, "read", &[]);
    (ranking(&mut req).clauses, ranking(&mut req).clause_texts) = (&clauses, &texts);
    ranking(&mut req).clause_k = 1;
    let outcome = route(&index, &bm25, &req, &gate).unwrap();
    assert_eq!(outcome.clauses.len(), MAX_RANKED_CLAUSES);
    assert!(outcome.clauses.iter().all(|clause| clause.len() == 1));
    ranking(&mut req).clause_texts = &texts[..1];
    let err = route(&index, &bm25, &req, &gate).unwrap_err().to_string();
    assert!(err.contains("1 clause texts for 18 clause vectors"), "{err}");
    ranking(&mut req).clause_texts = &texts;
    ranking(&mut req).lifted = &[60];
    let err = route(&index, &bm25, &req, &gate).unwrap_err().to_string();
    assert!(err.contains("lifted row 60 is out of range"), "{err}");
}

#[test]
fn a_row_whose_name_the_query_holds_moves_past_close_scores_only() {
    let dir = tempfile::tempdir().unwrap();
    let (index, bm25) = fixture(dir.path());
    let gate = index.gate(&[0], None, None).unwrap();
    // Dense alone (alpha 1, raw cosines): rows 0 > 3 > 1 by a little, row 2 far below.
    let vector = [1.0, 0.9, 0.2, 0.95];
    let mut req = request(&vector, "write the file to disk", &[]);
    ranking(&mut req).alpha = 1.0;
    ranking(&mut req).method = FusionMethod::div_max();
    ranking(&mut req).k = 3;
    let rows = |req: &RouteRequest<'_>| -> Vec<u32> {
        let outcome = route(&index, &bm25, req, &gate).unwrap();
        outcome.ranked.iter().map(|r| r.row).collect()
    };
    assert_eq!(rows(&req), [0, 3, 1], "weight 0 ranks by fused score");
    ranking(&mut req).name_weight = 0.4;
    // The query holds both words of write_file (0.4), more than its 0.03 gap to list_dir and
    // the 0.26 that the place between them weighs (0.65 * (ln 3 - ln 2)); read_file holds one
    // of its two (0.2) and keeps the head.
    let outcome = route(&index, &bm25, &req, &gate).unwrap();
    let ranked: Vec<u32> = outcome.ranked.iter().map(|r| r.row).collect();
    assert_eq!(ranked, [0, 1, 3]);
    assert!(outcome.ranked[1].fused < outcome.ranked[2].fused, "each row keeps its own score");
    // A query holding no name word keeps the fused order.
    ranking(&mut req).text = "nothing named here";
    assert_eq!(rows(&req), [0, 3, 1]);
    ranking(&mut req).name_weight = f32::NAN;
    let err = route(&index, &bm25, &req, &gate).unwrap_err().to_string();
    assert!(err.contains("name_weight must be finite and >= 0"), "{err}");
}

#[test]
fn demoting_lowers_a_negative_score_too() {
    // divmax and raw fusion give negative scores, where a product would raise them.
    assert!((lowered(0.8, 0.5) - 0.4).abs() < 1e-6);
    assert!(lowered(-0.995, 0.1) < -0.995);
    assert!(lowered(-0.2, 0.5) < lowered(-0.1, 0.5));
    assert_eq!(lowered(-0.7, 1.0), -0.7);
    assert_eq!(lowered(0.0, 0.0), 0.0);
}
