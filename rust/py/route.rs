//! `route`: the router's one call into the core per turn.

use numpy::{PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;

use super::arrays::row_major;
use super::errors::InvalidInputError;
use super::index::PyIndex;
use super::text::{parse_method, PyBm25};
use crate::index::Index;
use crate::route::{
    dense_signal as route_signal, route as route_core, Ranking, RouteMode, RouteRequest, RoutedRow,
};

/// `(row, fused, dense, bm25)` of one routed row.
type Row = (u32, f32, f32, f32);

/// `(forced, ranked, n_gated, n_out_of_scope, gated, copies)`; `gated` rows carry their
/// missing flags, and `copies` pairs each ranked near copy with the row it copies.
type Outcome = (Vec<Row>, Vec<Row>, usize, usize, Vec<(Row, Vec<u32>)>, Vec<(u32, u32)>);

fn as_tuple(row: &RoutedRow) -> Row {
    (row.row, row.fused, row.dense, row.sparse)
}

fn slice<'a>(
    array: &'a Option<PyReadonlyArray1<'_, u32>>,
    what: &str,
) -> PyResult<Option<&'a [u32]>> {
    array.as_ref().map(|a| row_major(a, what)).transpose()
}

/// Dense scan, BM25, fusion, gating and top-k for one query, with the GIL released.
#[pyfunction]
#[pyo3(signature = (
    index, bm25, vector, text, *, alpha, method, top, k, threshold = None,
    flags = None, allow = None, deny = None, forced = None, clauses = None, clause_weight = 0.0,
    near_copy_cosine = None
))]
#[allow(clippy::too_many_arguments)]
fn route<'py>(
    py: Python<'py>,
    index: &Bound<'py, PyIndex>,
    bm25: &Bound<'py, PyBm25>,
    vector: PyReadonlyArray1<'py, f32>,
    text: &str,
    alpha: f32,
    method: &str,
    top: usize,
    k: usize,
    threshold: Option<f32>,
    flags: Option<PyReadonlyArray1<'py, u32>>,
    allow: Option<PyReadonlyArray1<'py, u32>>,
    deny: Option<PyReadonlyArray1<'py, u32>>,
    forced: Option<PyReadonlyArray1<'py, u32>>,
    clauses: Option<PyReadonlyArray2<'py, f32>>,
    clause_weight: f32,
    near_copy_cosine: Option<f32>,
) -> PyResult<Outcome> {
    let method = parse_method(method, top, 60.0)?;
    let index = &index.get().index;
    let bm25 = &bm25.get().index;
    let vector = row_major(&vector, "vector")?;
    let gate = index.gate(
        slice(&flags, "flags")?.unwrap_or_default(),
        slice(&allow, "allow")?,
        slice(&deny, "deny")?,
    )?;
    let clauses = clauses.as_ref().map(|c| clause_values(c, index)).transpose()?;
    let ranking = Ranking {
        vector,
        clauses: clauses.unwrap_or_default(),
        clause_weight,
        text,
        alpha,
        method,
        k,
        threshold,
        rankable: None,
        near_copy_cosine,
    };
    let forced = slice(&forced, "forced")?.unwrap_or_default();
    let request = RouteRequest { forced, mode: RouteMode::Rank(ranking) };
    let outcome = py.detach(|| route_core(index, bm25, &request, &gate))?;
    Ok((
        outcome.forced.iter().map(as_tuple).collect(),
        outcome.ranked.iter().map(as_tuple).collect(),
        outcome.n_gated,
        outcome.n_out_of_scope,
        outcome.gated.iter().map(|(row, missing)| (as_tuple(row), missing.clone())).collect(),
        outcome.ranked.iter().filter_map(|r| r.copy_of.map(|of| (r.row, of))).collect(),
    ))
}

/// The values of an (m, d) clause array, checked against the index's dimension.
fn clause_values<'a>(clauses: &'a PyReadonlyArray2<'_, f32>, index: &Index) -> PyResult<&'a [f32]> {
    let shape = clauses.shape();
    if shape[1] != index.dim() {
        return Err(InvalidInputError::new_err(format!(
            "clauses has shape ({}, {}); the index has dimension {}",
            shape[0],
            shape[1],
            index.dim()
        )));
    }
    row_major(clauses, "clauses")
}

/// The dense signal `route` fuses, from every row's whole-query cosine and the query's clause
/// vectors.
#[pyfunction]
fn dense_signal<'py>(
    py: Python<'py>,
    index: &Bound<'py, PyIndex>,
    cosine: PyReadonlyArray1<'py, f32>,
    clauses: PyReadonlyArray2<'py, f32>,
    clause_weight: f32,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let index = &index.get().index;
    let cosine = row_major(&cosine, "cosine")?;
    let clauses = clause_values(&clauses, index)?;
    let signal = py.detach(|| route_signal(index, cosine, clauses, clause_weight))?;
    Ok(PyArray1::from_vec(py, signal.into_owned()))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(route, m)?)?;
    m.add_function(wrap_pyfunction!(dense_signal, m)?)
}
