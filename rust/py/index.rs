//! `Index`: build, open, search.
//!
//! Arguments are borrowed from numpy without copies where the core can use them as they are
//! (queries); the GIL is released around every scan; results go back as numpy arrays that
//! take ownership of the Rust buffers.

use std::path::PathBuf;

use numpy::{PyArray1, PyArray2, PyArrayMethods, PyUntypedArrayMethods, ToPyArray};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::args;
use super::arrays::{borrow_array, query_scores, row_major, row_major_copy};
use super::error::InvalidInputError;
use super::gating::{extract_masks, flag_list, row_list, row_list_values};
use crate::gating::Gate;
use crate::index::{BuildOptions, GatedCandidate, Index, SearchResult};
use crate::matrix_file::{Dtype, OpenOptions};
use crate::topk::Hit;

/// `(rows, scores)` of one search, as numpy arrays.
type Hits<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<f32>>);

/// A memory-mapped embedding index. Immutable once opened, so safe to share between threads.
#[pyclass(frozen, name = "Index", module = "toolgate._toolgate")]
pub struct PyIndex {
    pub(super) index: Index,
}

#[pymethods]
impl PyIndex {
    /// Writes an index of `vectors` ((N, d) float32) to `path` atomically and opens it.
    #[staticmethod]
    #[pyo3(
        signature = (
            path, vectors, *, dtype = "f32".to_owned(), model_id = String::new(), masks = None,
            ids = None
        ),
        text_signature = "(path, vectors, *, dtype='f32', model_id='', masks=None, ids=None)"
    )]
    fn build(
        py: Python<'_>,
        #[pyo3(from_py_with = args::path)] path: PathBuf,
        vectors: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::text)] dtype: String,
        #[pyo3(from_py_with = args::text)] model_id: String,
        masks: Option<&Bound<'_, PyAny>>,
        ids: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let dtype = Dtype::parse(&dtype)?;
        let model_id = model_id.as_str();
        let vectors = borrow_array::<f32, numpy::Ix2>(vectors, "vectors", "a 2-D float32 array")?;
        let [rows, dim] = [vectors.shape()[0], vectors.shape()[1]];
        // The core normalises into a new buffer anyway, so a strided, Fortran-ordered or
        // misaligned input costs one copy here.
        let values = row_major_copy(&vectors, "vectors")?;
        let (masks, mask_words) = match masks {
            Some(masks) => extract_masks(masks, rows)?,
            None => (Vec::new(), 0),
        };
        let ids = ids.map(|ids| extract_ids(ids, rows)).transpose()?;
        let options =
            BuildOptions { dtype, model_id, ids: ids.as_deref(), masks: &masks, mask_words };
        py.detach(|| Index::build(&path, &values, dim, &options))?;
        let index = Index::open(&path, OpenOptions { verify: false, expected_dim: None }, 1)?;
        Ok(Self { index })
    }

    /// Maps the index at `path` read-only.
    #[staticmethod]
    #[pyo3(signature = (path, *, verify = true, expected_dim = None, threads = 1))]
    fn open(
        py: Python<'_>,
        #[pyo3(from_py_with = args::path)] path: PathBuf,
        verify: bool,
        #[pyo3(from_py_with = args::optional_count)] expected_dim: Option<i64>,
        #[pyo3(from_py_with = args::integer)] threads: i64,
    ) -> PyResult<Self> {
        let positive = |value: i64, what: &str| {
            usize::try_from(value).ok().filter(|&v| v > 0).ok_or_else(|| {
                InvalidInputError::new_err(format!(
                    "{what} must be a positive integer, got {value}"
                ))
            })
        };
        let expected_dim = expected_dim.map(|dim| positive(dim, "expected_dim")).transpose()?;
        let threads = positive(threads, "threads")?;
        let options = OpenOptions { verify, expected_dim };
        let index = py.detach(|| Index::open(&path, options, threads))?;
        Ok(Self { index })
    }

    /// The best `k` eligible rows for `query`, as `(rows, scores)`, best first.
    #[pyo3(
        signature = (query, k = Some(10), *, threshold = None, flags = None, allow = None, deny = None),
        text_signature = "(self, query, k=10, *, threshold=None, flags=None, allow=None, deny=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn search<'py>(
        &self,
        py: Python<'py>,
        query: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = args::optional_count)] k: Option<i64>,
        threshold: Option<f32>,
        flags: Option<&Bound<'py, PyAny>>,
        allow: Option<&Bound<'py, PyAny>>,
        deny: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Hits<'py>> {
        let result = self.run(py, query, 1, k, threshold, [flags, allow, deny])?.pop();
        Ok(hits_to_numpy(py, &result.expect("one query, one result").hits))
    }

    /// Like `search`, returning a `SearchResult` that also reports the rows gated out.
    #[pyo3(
        signature = (query, k = Some(10), *, threshold = None, flags = None, allow = None, deny = None),
        text_signature = "(self, query, k=10, *, threshold=None, flags=None, allow=None, deny=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn search_gated(
        &self,
        py: Python<'_>,
        query: &Bound<'_, PyAny>,
        #[pyo3(from_py_with = args::optional_count)] k: Option<i64>,
        threshold: Option<f32>,
        flags: Option<&Bound<'_, PyAny>>,
        allow: Option<&Bound<'_, PyAny>>,
        deny: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PySearchResult> {
        let result = self.run(py, query, 1, k, threshold, [flags, allow, deny])?.pop();
        Ok(PySearchResult::new(py, result.expect("one query, one result")))
    }

    /// `search` for each row of `queries` ((M, d) float32), reading the matrix once.
    #[pyo3(
        signature = (queries, k = Some(10), *, threshold = None, flags = None, allow = None, deny = None),
        text_signature = "(self, queries, k=10, *, threshold=None, flags=None, allow=None, deny=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn search_batch<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        #[pyo3(from_py_with = args::optional_count)] k: Option<i64>,
        threshold: Option<f32>,
        flags: Option<&Bound<'py, PyAny>>,
        allow: Option<&Bound<'py, PyAny>>,
        deny: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Hits<'py>>> {
        let results = self.run(py, queries, 2, k, threshold, [flags, allow, deny])?;
        Ok(results.iter().map(|result| hits_to_numpy(py, &result.hits)).collect())
    }

    /// Dense scores of `query` against every row, at the storage precision.
    fn scores<'py>(
        &self,
        py: Python<'py>,
        query: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        query_scores(py, query, |values| self.index.scores(values))
    }

    /// The stored f32 vectors of `rows` as an (len(rows), d) array (a copy).
    fn vectors<'py>(
        &self,
        py: Python<'py>,
        rows: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let rows = row_list(rows, "rows", self.index.len())?;
        let values = py.detach(|| self.index.vectors(&rows))?;
        let array = PyArray1::from_vec(py, values);
        array.reshape([rows.len(), self.index.dim()])
    }

    /// Exact f32 scores of `query` against `rows`.
    fn rescore<'py>(
        &self,
        py: Python<'py>,
        query: &Bound<'py, PyAny>,
        rows: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let query = borrow_array::<f32, numpy::Ix1>(query, "query", "a 1-D float32 array")?;
        let values = row_major(&query, "query")?;
        let rows = row_list(rows, "rows", self.index.len())?;
        let scores = py.detach(|| self.index.rescore(values, &rows))?;
        Ok(PyArray1::from_vec(py, scores))
    }

    /// Re-reads the whole file and checks the payload checksum.
    fn verify(&self, py: Python<'_>) -> PyResult<()> {
        Ok(py.detach(|| self.index.file().verify())?)
    }

    /// The flags `row` requires, ascending.
    fn required_flags(&self, #[pyo3(from_py_with = args::integer)] row: i64) -> PyResult<Vec<u32>> {
        let row = row_list_values(&[row], "row", self.index.len())?[0];
        self.index.file().check_unchanged()?;
        let gate = Gate::new(self.index.len(), self.index.file().masks(), self.mask_words())?;
        Ok(gate.required_flags(row as usize))
    }

    fn __len__(&self) -> usize {
        self.index.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Index(path={:?}, rows={}, dim={}, dtype={:?}, model_id={:?})",
            self.index.path().display().to_string(),
            self.index.len(),
            self.index.dim(),
            self.dtype(),
            self.model_id()
        )
    }

    /// Vector dimension.
    #[getter]
    fn dim(&self) -> usize {
        self.index.dim()
    }

    /// Storage type: "f32", "int8" or "bf16".
    #[getter]
    fn dtype(&self) -> &'static str {
        self.index.file().dtype().name()
    }

    /// The model id stored at build time.
    #[getter]
    fn model_id(&self) -> &str {
        self.index.file().model_id()
    }

    /// The path the index was opened from.
    #[getter]
    fn path(&self) -> PathBuf {
        self.index.path().to_path_buf()
    }

    /// Words per gating mask (64 flags each); 0 when the index has no masks.
    #[getter]
    fn mask_words(&self) -> usize {
        self.index.file().mask_words()
    }

    /// Number of row ranges a scan is split into.
    #[getter]
    fn threads(&self) -> usize {
        self.index.threads()
    }

    /// The row ids stored at build time, as a uint64 array.
    #[getter]
    fn ids<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<u64>>> {
        self.index.file().check_unchanged()?;
        Ok(self.index.file().ids().to_pyarray(py))
    }
}

impl PyIndex {
    /// Shared body of the search methods: parse, release the GIL, search.
    fn run(
        &self,
        py: Python<'_>,
        queries: &Bound<'_, PyAny>,
        ndim: usize,
        k: Option<i64>,
        threshold: Option<f32>,
        [flags, allow, deny]: [Option<&Bound<'_, PyAny>>; 3],
    ) -> PyResult<Vec<SearchResult>> {
        let k = match k {
            None => usize::MAX,
            Some(k) if k >= 1 => usize::try_from(k).unwrap_or(usize::MAX),
            Some(k) => {
                return Err(InvalidInputError::new_err(format!(
                    "k must be a positive integer or None, got {k}"
                )))
            }
        };
        if threshold.is_some_and(|t| t.is_nan()) {
            return Err(InvalidInputError::new_err("threshold must not be NaN"));
        }
        let n = self.index.len();
        let flags = flags.map(|flags| flag_list(flags)).transpose()?.unwrap_or_default();
        let allow = allow.map(|rows| row_list(rows, "allow", n)).transpose()?;
        let deny = deny.map(|rows| row_list(rows, "deny", n)).transpose()?;
        let gate = self.index.gate(&flags, allow.as_deref(), deny.as_deref())?;
        let run =
            |values: &[f32]| py.detach(|| self.index.search_batch(values, k, threshold, &gate));
        let results = if ndim == 1 {
            let query = borrow_array::<f32, numpy::Ix1>(queries, "query", "a 1-D float32 array")?;
            let query = row_major(&query, "query")?;
            vec![py.detach(|| self.index.search(query, k, threshold, &gate))?]
        } else {
            let queries =
                borrow_array::<f32, numpy::Ix2>(queries, "queries", "a 2-D float32 array")?;
            if queries.shape()[0] == 0 {
                return Ok(Vec::new());
            }
            if queries.shape()[1] != self.index.dim() {
                return Err(InvalidInputError::new_err(format!(
                    "queries have dimension {}, the index has dimension {}",
                    queries.shape()[1],
                    self.index.dim()
                )));
            }
            run(row_major(&queries, "queries")?)?
        };
        Ok(results)
    }
}

/// The outcome of `Index.search_gated`: the hits plus what the gate kept out.
#[pyclass(frozen, name = "SearchResult", module = "toolgate._toolgate")]
pub struct PySearchResult {
    rows: Py<PyArray1<i64>>,
    scores: Py<PyArray1<f32>>,
    n_gated: usize,
    n_out_of_scope: usize,
    gated: Vec<Py<PyGatedCandidate>>,
}

impl PySearchResult {
    fn new(py: Python<'_>, result: SearchResult) -> Self {
        let (rows, scores) = hits_to_numpy(py, &result.hits);
        let gated = result
            .gated
            .into_iter()
            .map(|candidate| Py::new(py, PyGatedCandidate::from(candidate)))
            .collect::<PyResult<_>>()
            .expect("allocating a small pyclass");
        Self {
            rows: rows.unbind(),
            scores: scores.unbind(),
            n_gated: result.n_gated,
            n_out_of_scope: result.n_out_of_scope,
            gated,
        }
    }
}

#[pymethods]
impl PySearchResult {
    /// Row numbers of the hits (int64), best first.
    #[getter]
    fn rows(&self, py: Python<'_>) -> Py<PyArray1<i64>> {
        self.rows.clone_ref(py)
    }

    /// Exact scores of the hits (float32), best first.
    #[getter]
    fn scores(&self, py: Python<'_>) -> Py<PyArray1<f32>> {
        self.scores.clone_ref(py)
    }

    /// Rows in scope but gated out by missing flags.
    #[getter]
    fn n_gated(&self) -> usize {
        self.n_gated
    }

    /// Rows outside the allow set or inside the deny set.
    #[getter]
    fn n_out_of_scope(&self) -> usize {
        self.n_out_of_scope
    }

    /// The best few rows gated out by missing flags, best first.
    #[getter]
    fn gated<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.gated.iter().map(|candidate| candidate.clone_ref(py)))
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        self.rows.bind(py).len()
    }

    fn __iter__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let pairs = PyList::empty(py);
        let (rows, scores) = (self.rows.bind(py).readonly(), self.scores.bind(py).readonly());
        for (row, score) in rows.as_array().iter().zip(scores.as_array().iter()) {
            pairs.append((*row, *score))?;
        }
        pairs.try_iter().map(Bound::into_any)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "SearchResult(hits={}, n_gated={}, n_out_of_scope={}, gated={})",
            self.__len__(py),
            self.n_gated,
            self.n_out_of_scope,
            self.gated.len()
        )
    }

    /// Plain-Python form for logs and JSON.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        dict.set_item("rows", self.rows.bind(py).call_method0("tolist")?)?;
        dict.set_item("scores", self.scores.bind(py).call_method0("tolist")?)?;
        dict.set_item("n_gated", self.n_gated)?;
        dict.set_item("n_out_of_scope", self.n_out_of_scope)?;
        let gated = PyList::empty(py);
        for candidate in &self.gated {
            gated.append(candidate.get().to_dict(py)?)?;
        }
        dict.set_item("gated", gated)?;
        Ok(dict)
    }
}

/// A row kept out by missing flags: which flags would have let it through.
#[pyclass(frozen, name = "GatedCandidate", module = "toolgate._toolgate")]
pub struct PyGatedCandidate {
    row: u32,
    score: f32,
    missing_flags: Vec<u32>,
}

impl From<GatedCandidate> for PyGatedCandidate {
    fn from(candidate: GatedCandidate) -> Self {
        Self { row: candidate.row, score: candidate.score, missing_flags: candidate.missing_flags }
    }
}

#[pymethods]
impl PyGatedCandidate {
    /// Row number.
    #[getter]
    fn row(&self) -> u32 {
        self.row
    }

    /// Exact score.
    #[getter]
    fn score(&self) -> f32 {
        self.score
    }

    /// Required flags the caller did not satisfy, ascending.
    #[getter]
    fn missing_flags(&self) -> Vec<u32> {
        self.missing_flags.clone()
    }

    fn __repr__(&self) -> String {
        format!(
            "GatedCandidate(row={}, score={:.4}, missing_flags={:?})",
            self.row, self.score, self.missing_flags
        )
    }

    /// Plain-Python form for logs and JSON.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        dict.set_item("row", self.row)?;
        dict.set_item("score", self.score)?;
        dict.set_item("missing_flags", self.missing_flags.clone())?;
        Ok(dict)
    }
}

fn hits_to_numpy<'py>(py: Python<'py>, hits: &[Hit]) -> Hits<'py> {
    let rows = hits.iter().map(|hit| i64::from(hit.row)).collect();
    let scores = hits.iter().map(|hit| hit.score).collect();
    (PyArray1::from_vec(py, rows), PyArray1::from_vec(py, scores))
}

fn extract_ids(obj: &Bound<'_, PyAny>, rows: usize) -> PyResult<Vec<u64>> {
    let ids: Vec<u64> = obj.extract().map_err(|err| {
        InvalidInputError::new_err(format!("ids must be a sequence of integers in 0..2^64: {err}"))
    })?;
    if ids.len() != rows {
        return Err(InvalidInputError::new_err(format!(
            "ids has {} entries, vectors has {rows}",
            ids.len()
        )));
    }
    Ok(ids)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyIndex>()?;
    m.add_class::<PySearchResult>()?;
    m.add_class::<PyGatedCandidate>()?;
    Ok(())
}
