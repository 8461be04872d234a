//! `route` and `route_select`: the router's one call into the core per turn, and its outcome.
//!
//! Both build one core [`RouteRequest`], in [`RouteMode::Rank`] or [`RouteMode::Select`], and
//! return the same frozen `RouteOutcome`, read by name.

use numpy::{Ix1, Ix2, PyArray1, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;

use super::args;
use super::arrays::{borrow_array, borrow_optional, row_major};
use super::bm25::PyBm25;
use super::error::InvalidInputError;
use super::fusion::parse_method;
use super::index::PyIndex;
use crate::gating::Gate;
use crate::index::Index;
use crate::route::{
    dense_signal as route_signal, route as route_core, Ranking, RouteMode, RouteOutcome,
    RouteRequest, RoutedRow,
};

/// One active row of a route and the evidence for it.
#[pyclass(frozen, get_all, name = "RoutedRow", module = "toolgate._toolgate")]
pub struct PyRoutedRow {
    /// Row number in the index.
    row: u32,
    /// Fused score.
    fused: f32,
    /// Whole-query cosine, at the index's storage precision.
    dense: f32,
    /// BM25 score.
    bm25: f32,
    /// The row placed above that this ranked row nearly copies, if it does.
    copy_of: Option<u32>,
}

impl From<&RoutedRow> for PyRoutedRow {
    fn from(row: &RoutedRow) -> Self {
        let RoutedRow { row, fused, dense, sparse, copy_of } = *row;
        Self { row, fused, dense, bm25: sparse, copy_of }
    }
}

#[pymethods]
impl PyRoutedRow {
    fn __repr__(&self) -> String {
        let copy = self.copy_of.map_or_else(String::new, |of| format!(", copy_of={of}"));
        format!("RoutedRow(row={}, fused={:.4}{copy})", self.row, self.fused)
    }
}

/// A row the gate kept out of a route: the fused score it would have ranked with, and the
/// flags it misses.
#[pyclass(frozen, get_all, name = "GatedRow", module = "toolgate._toolgate")]
pub struct PyGatedRow {
    /// Row number in the index.
    row: u32,
    /// Fused score.
    fused: f32,
    /// Required flags the caller did not satisfy, ascending.
    missing_flags: Vec<u32>,
}

#[pymethods]
impl PyGatedRow {
    fn __repr__(&self) -> String {
        format!("GatedRow(row={}, missing_flags={:?})", self.row, self.missing_flags)
    }
}

/// What one `route` or `route_select` call chose, and what the gate kept out.
#[pyclass(frozen, name = "RouteOutcome", module = "toolgate._toolgate")]
pub struct PyRouteOutcome {
    outcome: RouteOutcome,
}

#[pymethods]
impl PyRouteOutcome {
    /// Eligible forced rows: best fused score first from `route`, in the order given from
    /// `route_select`.
    #[getter]
    fn forced(&self) -> Vec<PyRoutedRow> {
        self.outcome.forced.iter().map(PyRoutedRow::from).collect()
    }

    /// The best `k` other eligible rows, best first, near copies moved down.
    #[getter]
    fn ranked(&self) -> Vec<PyRoutedRow> {
        self.outcome.ranked.iter().map(PyRoutedRow::from).collect()
    }

    /// Rows in scope but gated out by missing flags.
    #[getter]
    fn n_gated(&self) -> usize {
        self.outcome.n_gated
    }

    /// Rows outside `allow` or inside `deny`.
    #[getter]
    fn n_out_of_scope(&self) -> usize {
        self.outcome.n_out_of_scope
    }

    /// Each ranked clause's best `clause_k` rows, best first, with the clause's own scores.
    #[getter]
    fn clauses(&self) -> Vec<Vec<PyRoutedRow>> {
        let rows = |clause: &Vec<RoutedRow>| clause.iter().map(PyRoutedRow::from).collect();
        self.outcome.clauses.iter().map(rows).collect()
    }

    /// The best few gated rows that would otherwise have been active, best first.
    #[getter]
    fn gated(&self) -> Vec<PyGatedRow> {
        let gated = self.outcome.gated.iter().map(|(routed, missing)| PyGatedRow {
            row: routed.row,
            fused: routed.fused,
            missing_flags: missing.clone(),
        });
        gated.collect()
    }

    fn __repr__(&self) -> String {
        let o = &self.outcome;
        format!(
            "RouteOutcome(forced={}, ranked={}, n_gated={}, n_out_of_scope={}, gated={}{})",
            o.forced.len(),
            o.ranked.len(),
            o.n_gated,
            o.n_out_of_scope,
            o.gated.len(),
            if o.clauses.is_empty() {
                String::new()
            } else {
                format!(", clauses={}", o.clauses.len())
            }
        )
    }
}

/// Rows or flags: the array `obj` is, or an `InvalidInputError` naming `what` and saying what
/// was given (pyo3's own conversion raises a bare `TypeError` naming neither).
fn u32_rows<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<PyReadonlyArray1<'py, u32>> {
    borrow_array::<u32, Ix1>(obj, what, "a 1-D uint32 array")
}

/// [`u32_rows`] where given.
fn optional_rows<'py>(
    obj: Option<&Bound<'py, PyAny>>,
    what: &str,
) -> PyResult<Option<PyReadonlyArray1<'py, u32>>> {
    borrow_optional::<u32, Ix1>(obj, what, "a 1-D uint32 array")
}

/// The (m, d) float32 clause vectors `obj` is, or an `InvalidInputError` naming `what`.
fn clause_array<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<PyReadonlyArray2<'py, f32>> {
    borrow_array::<f32, Ix2>(obj, what, "a 2-D float32 array")
}

/// The 1-D float32 array `obj` is, or an `InvalidInputError` naming `what`.
fn f32_vector<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<PyReadonlyArray1<'py, f32>> {
    borrow_array::<f32, Ix1>(obj, what, "a 1-D float32 array")
}

fn slice<'a>(
    array: &'a Option<PyReadonlyArray1<'_, u32>>,
    what: &str,
) -> PyResult<Option<&'a [u32]>> {
    array.as_ref().map(|a| row_major(a, what)).transpose()
}

/// The gate of one route: `flags` satisfied, `allow` and `deny` rows.
fn gate<'i>(
    index: &'i Index,
    flags: Option<&Bound<'_, PyAny>>,
    allow: Option<&Bound<'_, PyAny>>,
    deny: Option<&Bound<'_, PyAny>>,
) -> PyResult<Gate<'i>> {
    let (flags, allow, deny) = (
        optional_rows(flags, "flags")?,
        optional_rows(allow, "allow")?,
        optional_rows(deny, "deny")?,
    );
    let flags = slice(&flags, "flags")?.unwrap_or_default();
    Ok(index.gate(flags, slice(&allow, "allow")?, slice(&deny, "deny")?)?)
}

/// The query vector of a route, checked against the index's dimension (the core's own check
/// would call it `query`, which `route` has no argument named).
fn route_vector<'a>(vector: &'a PyReadonlyArray1<'_, f32>, index: &Index) -> PyResult<&'a [f32]> {
    let values = row_major(vector, "vector")?;
    if values.len() != index.dim() {
        return Err(InvalidInputError::new_err(format!(
            "vector has {} values, the index has dimension {}",
            values.len(),
            index.dim()
        )));
    }
    Ok(values)
}

/// Dense scan, BM25, fusion, gating and top-k for one query, with the GIL released.
#[pyfunction]
#[pyo3(signature = (
    index, bm25, vector, text, *, alpha, method, top, k, threshold = None,
    flags = None, allow = None, deny = None, forced = None, rankable = None, clauses = None,
    clause_weight = 0.0, clause_texts = None, clause_fusion = 0.0, clause_k = 0, lifted = None,
    near_copy_cosine = None, demoted = None, demote_weight = 1.0, name_weight = 0.0
))]
#[allow(clippy::too_many_arguments)]
fn route<'py>(
    py: Python<'py>,
    index: &Bound<'py, PyIndex>,
    bm25: &Bound<'py, PyBm25>,
    vector: &Bound<'py, PyAny>,
    text: &str,
    alpha: f32,
    method: &str,
    #[pyo3(from_py_with = args::integer)] top: i64,
    #[pyo3(from_py_with = args::integer)] k: i64,
    threshold: Option<f32>,
    flags: Option<&Bound<'py, PyAny>>,
    allow: Option<&Bound<'py, PyAny>>,
    deny: Option<&Bound<'py, PyAny>>,
    forced: Option<&Bound<'py, PyAny>>,
    rankable: Option<&Bound<'py, PyAny>>,
    clauses: Option<&Bound<'py, PyAny>>,
    clause_weight: f32,
    clause_texts: Option<Vec<String>>,
    clause_fusion: f32,
    #[pyo3(from_py_with = args::integer)] clause_k: i64,
    lifted: Option<&Bound<'py, PyAny>>,
    near_copy_cosine: Option<f32>,
    demoted: Option<&Bound<'py, PyAny>>,
    demote_weight: f32,
    name_weight: f32,
) -> PyResult<PyRouteOutcome> {
    let (top, k) = (args::count(top, "top")?, args::count(k, "k")?);
    let clause_k = args::count(clause_k, "clause_k")?;
    let method = parse_method(method, top, 60.0)?;
    let (index, bm25) = (&index.get().index, &bm25.get().index);
    let vector = f32_vector(vector, "vector")?;
    let gate = gate(index, flags, allow, deny)?;
    let clauses = clauses.map(|c| clause_array(c, "clauses")).transpose()?;
    let clauses = clauses.as_ref().map(|c| clause_values(c, index)).transpose()?;
    let clause_texts: Vec<&str> = clause_texts.iter().flatten().map(String::as_str).collect();
    let (forced, rankable) =
        (optional_rows(forced, "forced")?, optional_rows(rankable, "rankable")?);
    let (lifted, demoted) = (optional_rows(lifted, "lifted")?, optional_rows(demoted, "demoted")?);
    let ranking = Ranking {
        vector: route_vector(&vector, index)?,
        clauses: clauses.unwrap_or_default(),
        clause_weight,
        clause_texts: &clause_texts,
        clause_fusion,
        clause_k,
        lifted: slice(&lifted, "lifted")?.unwrap_or_default(),
        text,
        alpha,
        method,
        k,
        threshold,
        rankable: slice(&rankable, "rankable")?,
        near_copy_cosine,
        demoted: slice(&demoted, "demoted")?.unwrap_or_default(),
        demote_weight,
        name_weight,
    };
    let forced = slice(&forced, "forced")?.unwrap_or_default();
    let request = RouteRequest { forced, mode: RouteMode::Rank(ranking) };
    let outcome = py.detach(|| route_core(index, bm25, &request, &gate))?;
    Ok(PyRouteOutcome { outcome })
}

/// ToolSearch's `select:`: the eligible `rows` alone, in the order given, unscored.
#[pyfunction]
#[pyo3(signature = (index, bm25, rows, *, flags = None, allow = None, deny = None))]
fn route_select(
    index: &Bound<'_, PyIndex>,
    bm25: &Bound<'_, PyBm25>,
    rows: &Bound<'_, PyAny>,
    flags: Option<&Bound<'_, PyAny>>,
    allow: Option<&Bound<'_, PyAny>>,
    deny: Option<&Bound<'_, PyAny>>,
) -> PyResult<PyRouteOutcome> {
    let (index, bm25) = (&index.get().index, &bm25.get().index);
    let rows = u32_rows(rows, "rows")?;
    let gate = gate(index, flags, allow, deny)?;
    let request = RouteRequest { forced: row_major(&rows, "rows")?, mode: RouteMode::Select };
    // Nothing is scanned: no O(N) work to release the GIL for.
    let outcome = route_core(index, bm25, &request, &gate)?;
    Ok(PyRouteOutcome { outcome })
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
    cosine: &Bound<'py, PyAny>,
    clauses: &Bound<'py, PyAny>,
    clause_weight: f32,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let index = &index.get().index;
    let (cosine, clauses) = (f32_vector(cosine, "cosine")?, clause_array(clauses, "clauses")?);
    let cosine = row_major(&cosine, "cosine")?;
    let clauses = clause_values(&clauses, index)?;
    let signal = py.detach(|| route_signal(index, cosine, clauses, clause_weight))?;
    Ok(PyArray1::from_vec(py, signal.into_owned()))
}

/// Adds `route`, `route_select`, `dense_signal` and the outcome classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRouteOutcome>()?;
    m.add_class::<PyRoutedRow>()?;
    m.add_class::<PyGatedRow>()?;
    m.add_function(wrap_pyfunction!(route, m)?)?;
    m.add_function(wrap_pyfunction!(route_select, m)?)?;
    m.add_function(wrap_pyfunction!(dense_signal, m)?)
}
