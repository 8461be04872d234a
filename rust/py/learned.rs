//! `LearnedRows`: the query vectors feedback stored per tool, and their vote at route time.
//!
//! The class is `frozen` over a read-write lock, so routes (readers) and feedback (a writer)
//! may come from any threads; a vote scans with the GIL released.

use std::sync::RwLock;

use numpy::{PyArray1, PyUntypedArrayMethods};
use pyo3::prelude::*;

use super::args;
use super::arrays::{borrow_array, query_scores, row_major};
use super::error::invalid;
use crate::learned::LearnedRows;

/// Stored query vectors (int8, one scale per row), each for one tool with a weight.
///
/// `LearnedRows(dim)` holds none. Rows are appended with `push`, dropped with `retain`, and
/// `votes` gives the vote of the stored rows nearest a query, grouped by tool.
#[pyclass(frozen, name = "LearnedRows", module = "toolgate._toolgate")]
struct PyLearnedRows {
    rows: RwLock<LearnedRows>,
}

impl PyLearnedRows {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, LearnedRows> {
        // A panic while holding the lock leaves the rows as they were: keep serving them.
        self.rows.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, LearnedRows> {
        self.rows.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[pymethods]
impl PyLearnedRows {
    #[new]
    fn new(#[pyo3(from_py_with = args::integer)] dim: i64) -> PyResult<Self> {
        Ok(Self { rows: RwLock::new(LearnedRows::new(args::count(dim, "dim")?)?) })
    }

    /// Appends one row per entry of `tools` ((n,) uint32): `vectors` ((n, dim) float32,
    /// L2-normalised) with `weights` ((n,) float32).
    fn push(
        &self,
        vectors: &Bound<'_, PyAny>,
        tools: &Bound<'_, PyAny>,
        weights: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let vectors = borrow_array::<f32, numpy::Ix2>(vectors, "vectors", "a 2-D float32 array")?;
        let tools = borrow_array::<u32, numpy::Ix1>(tools, "tools", "a 1-D uint32 array")?;
        let weights = borrow_array::<f32, numpy::Ix1>(weights, "weights", "a 1-D float32 array")?;
        let dim = self.read().dim();
        if vectors.shape()[1] != dim {
            return Err(invalid(format!(
                "vectors have {} columns, learned rows {dim}",
                vectors.shape()[1]
            )));
        }
        let (vectors, tools, weights) = (
            row_major(&vectors, "vectors")?,
            row_major(&tools, "tools")?,
            row_major(&weights, "weights")?,
        );
        Ok(self.write().push(vectors, tools, weights)?)
    }

    /// Sets row `row`'s weight.
    fn set_weight(
        &self,
        #[pyo3(from_py_with = args::integer)] row: i64,
        weight: f32,
    ) -> PyResult<()> {
        Ok(self.write().set_weight(args::count(row, "row")?, weight)?)
    }

    /// Keeps the rows whose entry of `keep` ((len,) bool) is true, in order.
    fn retain(&self, keep: &Bound<'_, PyAny>) -> PyResult<()> {
        let keep = borrow_array::<bool, numpy::Ix1>(keep, "keep", "a 1-D bool array")?;
        let keep = row_major(&keep, "keep")?;
        Ok(self.write().retain(keep)?)
    }

    /// Every row's cosine with `query` ((dim,) float32, finite), at int8 precision.
    fn scores<'py>(
        &self,
        py: Python<'py>,
        query: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        query_scores(py, query, |values| self.read().scores(values))
    }

    /// The votes of the `neighbours` rows nearest `query` with a cosine of at least `floor`,
    /// by tool, largest first: `(tools, votes, best)` arrays, where a vote is the sum of
    /// `weight * cosine` of the tool's rows among them and `best` its best cosine.
    #[allow(clippy::type_complexity)]
    fn votes<'py>(
        &self,
        py: Python<'py>,
        query: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = args::integer)] neighbours: i64,
        floor: f32,
    ) -> PyResult<(Bound<'py, PyArray1<u32>>, Bound<'py, PyArray1<f32>>, Bound<'py, PyArray1<f32>>)>
    {
        let neighbours = args::count(neighbours, "neighbours")?;
        let query = borrow_array::<f32, numpy::Ix1>(query, "query", "a 1-D float32 array")?;
        let values = row_major(&query, "query")?;
        let votes = py.detach(|| self.read().votes(values, neighbours, floor))?;
        Ok((
            PyArray1::from_iter(py, votes.iter().map(|v| v.tool)),
            PyArray1::from_iter(py, votes.iter().map(|v| v.vote)),
            PyArray1::from_iter(py, votes.iter().map(|v| v.best)),
        ))
    }

    /// The tool of each row, in order.
    #[getter]
    fn tools<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u32>> {
        PyArray1::from_slice(py, self.read().tools())
    }

    /// The weight of each row, in order.
    #[getter]
    fn weights<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f32>> {
        PyArray1::from_slice(py, self.read().weights())
    }

    /// Values per row.
    #[getter]
    fn dim(&self) -> usize {
        self.read().dim()
    }

    fn __len__(&self) -> usize {
        self.read().len()
    }
}

/// Adds `LearnedRows` to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLearnedRows>()
}
