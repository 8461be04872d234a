//! Bindings for BM25 (`Bm25`), score fusion (`fuse`) and the schema cache (`SchemaCache`).
//!
//! Every class is `frozen` over immutable or internally locked core types, so one instance
//! may be shared by any number of threads with or without the GIL. O(N) work runs detached
//! from the interpreter; arguments are validated here so bad input is an `InvalidInputError`
//! naming the argument, never a panic.

use std::path::PathBuf;

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use super::arrays::row_major;
use super::errors::InvalidInputError;
use crate::bm25::{Bm25Index, Bm25Params, FieldWeights, ToolDocument};
use crate::cache::SchemaCache;
use crate::fusion::{self, FusionMethod, Normalizer};
use crate::tokenize;

fn invalid(message: String) -> PyErr {
    InvalidInputError::new_err(message)
}

/// `type(obj).__name__`, for error messages.
fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map_or_else(|_| "object".to_string(), |n| n.to_string())
}

/// A BM25 index over tool documents (name, description, parameter text, server).
///
/// Build with `Bm25.build(docs)`; row `i` of every result is `docs[i]`.
#[pyclass(frozen, name = "Bm25", module = "toolgate._toolgate")]
pub(super) struct PyBm25 {
    pub(super) index: Bm25Index,
}

const DOC_FIELDS: [&str; 4] = ["name", "description", "param_text", "server"];

/// One document from a dict (`name` required; `description`, `param_text`, `server`
/// optional) or a tuple `(name, description, param_text, server)` of 1 to 4 strings.
fn extract_document(item: &Bound<'_, PyAny>, row: usize) -> PyResult<ToolDocument> {
    let mut fields: [Option<String>; 4] = Default::default();
    let field_value = |value: &Bound<'_, PyAny>, field: &str| -> PyResult<String> {
        value.extract::<String>().map_err(|err| {
            let why = if value.is_instance_of::<PyString>() {
                // A str that is not valid Unicode: a lone surrogate from a bad decode.
                format!("is not valid Unicode ({})", err.value(value.py()))
            } else {
                format!("must be a str, got {}", type_name(value))
            };
            invalid(format!("docs[{row}][{field:?}] {why}"))
        })
    };
    if let Ok(dict) = item.cast::<PyDict>() {
        for (key, value) in dict.iter() {
            let key: String = key.extract().map_err(|_| {
                invalid(format!("docs[{row}] has a non-str key of type {}", type_name(&key)))
            })?;
            let Some(slot) = DOC_FIELDS.iter().position(|f| *f == key) else {
                return Err(invalid(format!(
                    "docs[{row}] has unknown key {key:?}; known keys: {}",
                    DOC_FIELDS.join(", ")
                )));
            };
            fields[slot] = Some(field_value(&value, &key)?);
        }
    } else if let Ok(tuple) = item.cast::<PyTuple>() {
        if tuple.is_empty() || tuple.len() > 4 {
            return Err(invalid(format!(
                "docs[{row}] is a tuple of {} items; expected (name, description, param_text, \
                 server) with 1 to 4 items",
                tuple.len()
            )));
        }
        for (slot, value) in tuple.iter().enumerate() {
            fields[slot] = Some(field_value(&value, DOC_FIELDS[slot])?);
        }
    } else {
        return Err(invalid(format!(
            "docs[{row}] must be a dict or a tuple, got {}",
            type_name(item)
        )));
    }
    let [name, description, param_text, server] = fields;
    let name = name.ok_or_else(|| invalid(format!("docs[{row}] has no \"name\"")))?;
    Ok(ToolDocument {
        name,
        description: description.unwrap_or_default(),
        param_text: param_text.unwrap_or_default(),
        server: server.unwrap_or_default(),
    })
}

/// Field weights from a dict with any of the keys `name`, `description`, `params`, `server`
/// (missing keys keep their defaults).
fn extract_weights(obj: Option<&Bound<'_, PyAny>>) -> PyResult<FieldWeights> {
    let mut weights = FieldWeights::default();
    let Some(obj) = obj.filter(|o| !o.is_none()) else { return Ok(weights) };
    let dict = obj.cast::<PyDict>().map_err(|_| {
        invalid(format!(
            "field_weights must be a dict of field name to weight, got {}",
            type_name(obj)
        ))
    })?;
    for (key, value) in dict.iter() {
        let key: String =
            key.extract().map_err(|_| invalid("field_weights keys must be str".into()))?;
        let weight: f32 = value.extract().map_err(|_| {
            invalid(format!("field_weights[{key:?}] must be a number, got {}", type_name(&value)))
        })?;
        let slot = match key.as_str() {
            "name" => &mut weights.name,
            "description" => &mut weights.description,
            "params" => &mut weights.params,
            "server" => &mut weights.server,
            _ => {
                return Err(invalid(format!(
                    "field_weights has unknown field {key:?}; known: name, description, params, \
                     server"
                )))
            }
        };
        *slot = weight;
    }
    Ok(weights)
}

#[pymethods]
impl PyBm25 {
    /// Indexes `docs`, a sequence of dicts (`name` required; `description`, `param_text`,
    /// `server` optional strings) or tuples `(name, description, param_text, server)`.
    #[staticmethod]
    #[pyo3(signature = (docs, *, k1 = 1.2, b = 0.75, field_weights = None))]
    fn build(
        py: Python<'_>,
        docs: &Bound<'_, PyAny>,
        k1: f32,
        b: f32,
        field_weights: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        if docs.is_instance_of::<PyString>() || docs.is_instance_of::<PyDict>() {
            return Err(invalid(format!(
                "docs must be a sequence of documents, got {}",
                type_name(docs)
            )));
        }
        let items = docs.try_iter().map_err(|_| {
            invalid(format!("docs must be a sequence of documents, got {}", type_name(docs)))
        })?;
        let mut documents = Vec::new();
        for (row, item) in items.enumerate() {
            documents.push(extract_document(&item?, row)?);
        }
        let params = Bm25Params { k1, b, weights: extract_weights(field_weights)? };
        let index = py.detach(|| Bm25Index::build(&documents, params))?;
        Ok(Self { index })
    }

    /// Reads an index written by `save`; a damaged or foreign file raises `IndexFormatError`.
    #[staticmethod]
    fn load(
        py: Python<'_>,
        #[pyo3(from_py_with = super::args::path)] path: PathBuf,
    ) -> PyResult<Self> {
        let index = py.detach(|| Bm25Index::load(&path))?;
        Ok(Self { index })
    }

    /// Writes the index to `path` atomically (temporary file, fsync, rename).
    fn save(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = super::args::path)] path: PathBuf,
    ) -> PyResult<()> {
        Ok(py.detach(|| self.index.save(&path))?)
    }

    /// BM25 score of every tool for `query` (float32, one per row, 0 where nothing matched).
    fn scores<'py>(&self, py: Python<'py>, query: &str) -> Bound<'py, PyArray1<f32>> {
        py.detach(|| self.index.scores(query)).into_pyarray(py)
    }

    /// Rows (uint32, ascending) whose id `server/name` contains every term of `term`.
    fn name_has_term<'py>(
        &self,
        py: Python<'py>,
        term: &str,
    ) -> PyResult<Bound<'py, PyArray1<u32>>> {
        Ok(self.index.name_has_term(term)?.into_pyarray(py))
    }

    /// Rows whose tool name or `server/name` id equals `name` (else equals it ignoring case).
    fn rows_named(&self, name: &str) -> Vec<u32> {
        self.index.rows_named(name)
    }

    /// Rows whose compound name or id the query mentions verbatim (ignoring case).
    fn mentioned_names(&self, query: &str) -> Vec<u32> {
        self.index.mentioned_names(query)
    }

    /// Term-frequency saturation the index was built with.
    #[getter]
    fn k1(&self) -> f32 {
        self.index.params().k1
    }

    /// Length normalisation the index was built with.
    #[getter]
    fn b(&self) -> f32 {
        self.index.params().b
    }

    /// Field weights the index was built with.
    #[getter]
    fn field_weights<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let w = self.index.params().weights;
        let dict = PyDict::new(py);
        dict.set_item("name", w.name)?;
        dict.set_item("description", w.description)?;
        dict.set_item("params", w.params)?;
        dict.set_item("server", w.server)?;
        Ok(dict)
    }

    fn __len__(&self) -> usize {
        self.index.len()
    }

    fn __repr__(&self) -> String {
        let p = self.index.params();
        format!(
            "Bm25(tools={}, terms={}, k1={}, b={})",
            self.index.len(),
            self.index.vocabulary_len(),
            p.k1,
            p.b
        )
    }
}

/// The terms BM25 indexes for `text`: split at separators, case and digit changes, lower-cased,
/// stop words dropped (unless `keep_stop_words`), words stemmed (English Snowball).
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

/// A read-only contiguous float32 1-D array, or an `InvalidInputError` saying what it is.
fn extract_scores<'py>(
    obj: &Bound<'py, PyAny>,
    name: &str,
) -> PyResult<PyReadonlyArray1<'py, f32>> {
    let array: PyReadonlyArray1<'py, f32> = obj.extract().map_err(|_| {
        let detail = match obj.getattr("dtype").and_then(|d| d.str()) {
            Ok(dtype) => format!(
                "array of dtype {dtype} with ndim {}",
                obj.getattr("ndim").map_or_else(|_| "?".to_string(), |n| n.to_string())
            ),
            Err(_) => type_name(obj),
        };
        invalid(format!("{name} must be a 1-D float32 numpy array, got {detail}"))
    })?;
    row_major(&array, name)?;
    Ok(array)
}

/// Parses a normaliser name: `raw`, `minmax` or `divmax`.
fn parse_normalizer(name: &str, top: usize) -> Option<Normalizer> {
    match name {
        "raw" => Some(Normalizer::Raw),
        "minmax" => Some(Normalizer::MinMax { top }),
        "divmax" => Some(Normalizer::DivMax),
        _ => None,
    }
}

/// Parses a fusion method: `rrf`, `minmax` (min-max on both), `divmax` (raw cosine plus BM25
/// divided by its max), or `"<dense>+<sparse>"` with each side `raw`, `minmax` or `divmax`.
pub(super) fn parse_method(method: &str, top: usize, rrf_k: f32) -> PyResult<FusionMethod> {
    let (dense, sparse) = match method {
        "rrf" => return Ok(FusionMethod::reciprocal_rank(rrf_k, top)),
        "minmax" => ("minmax", "minmax"),
        "divmax" => ("raw", "divmax"),
        other => other.split_once('+').unwrap_or((other, "")),
    };
    match (parse_normalizer(dense, top), parse_normalizer(sparse, top)) {
        (Some(dense), Some(sparse)) => Ok(FusionMethod::Weighted { dense, sparse }),
        _ => Err(invalid(format!(
            "unknown fusion method {method:?}; use \"minmax\", \"divmax\", \"rrf\" or \
             \"<dense>+<sparse>\" with each of raw, minmax, divmax"
        ))),
    }
}

/// Fuses dense (cosine) and BM25 scores into one float32 array, `alpha` weighting dense.
///
/// `method`: `"minmax"` maps each signal through min-max over its `top` best rows;
/// `"divmax"` keeps raw cosines and divides BM25 by its maximum; `"<dense>+<sparse>"` picks
/// each side from `raw`, `minmax`, `divmax`; `"rrf"` is reciprocal-rank fusion with
/// constant `rrf_k` over each signal's `top` best rows. `top = 0` means every row.
#[pyfunction]
#[pyo3(signature = (dense, sparse, *, alpha, method = "minmax", top = 100, rrf_k = 60.0))]
fn fuse<'py>(
    py: Python<'py>,
    dense: &Bound<'py, PyAny>,
    sparse: &Bound<'py, PyAny>,
    alpha: f32,
    method: &str,
    top: i64,
    rrf_k: f32,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let top = usize::try_from(top)
        .map_err(|_| invalid(format!("top must be >= 0 (0 means every row), got {top}")))?;
    let method = parse_method(method, top, rrf_k)?;
    let dense = extract_scores(dense, "dense")?;
    let sparse = extract_scores(sparse, "sparse")?;
    let (dense, sparse) = (dense.as_slice()?, sparse.as_slice()?);
    let fused = py.detach(|| fusion::fuse(dense, sparse, alpha, method))?;
    Ok(fused.into_pyarray(py))
}

/// A catalog version as the core's `u64`, or an `InvalidInputError`.
fn extract_version(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    obj.extract::<u64>().map_err(|_| {
        invalid(format!(
            "version must be an int in [0, 2**64), got {}",
            obj.repr().map_or_else(|_| type_name(obj), |r| r.to_string())
        ))
    })
}

/// A thread-safe LRU cache of schema JSON strings keyed by (tool id, catalog version).
///
/// `SchemaCache(max_entries, max_bytes)` bounds both the entry count and the bytes held
/// (UTF-8 length of tool ids plus schemas). A schema bigger than `max_bytes` on its own is
/// returned by `get_or_fetch` but never cached.
#[pyclass(frozen, name = "SchemaCache", module = "toolgate._toolgate")]
struct PySchemaCache {
    cache: SchemaCache,
}

#[pymethods]
impl PySchemaCache {
    #[new]
    fn new(max_entries: &Bound<'_, PyAny>, max_bytes: &Bound<'_, PyAny>) -> PyResult<Self> {
        let bound = |obj: &Bound<'_, PyAny>, name: &str| {
            obj.extract::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                invalid(format!(
                    "{name} must be a positive int, got {}",
                    obj.repr().map_or_else(|_| type_name(obj), |r| r.to_string())
                ))
            })
        };
        let cache =
            SchemaCache::new(bound(max_entries, "max_entries")?, bound(max_bytes, "max_bytes")?)?;
        Ok(Self { cache })
    }

    /// The cached schema of `tool_id` at `version`, or None; counts a hit or a miss.
    fn get(&self, tool_id: &str, version: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        Ok(self.cache.get(tool_id, extract_version(version)?).map(|s| s.to_string()))
    }

    /// Caches `schema`; returns False (caching nothing) if it alone exceeds `max_bytes`.
    fn put(&self, tool_id: &str, version: &Bound<'_, PyAny>, schema: &str) -> PyResult<bool> {
        Ok(self.cache.insert(tool_id, extract_version(version)?, schema))
    }

    /// The cached schema, or else `fetch()` (called without the cache's lock), then cached.
    fn get_or_fetch(
        &self,
        tool_id: &str,
        version: &Bound<'_, PyAny>,
        fetch: &Bound<'_, PyAny>,
    ) -> PyResult<String> {
        let version = extract_version(version)?;
        if !fetch.is_callable() {
            return Err(invalid(format!("fetch must be callable, got {}", type_name(fetch))));
        }
        let schema = self.cache.get_or_fetch(tool_id, version, || -> PyResult<String> {
            let value = fetch.call0()?;
            value.extract::<String>().map_err(|_| {
                invalid(format!(
                    "fetch for {tool_id:?} (version {version}) returned {}, expected the schema \
                     as a str",
                    type_name(&value)
                ))
            })
        })?;
        Ok(schema.to_string())
    }

    /// Counters and sizes: hits, misses, evictions, entries, bytes.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.cache.stats();
        let dict = PyDict::new(py);
        dict.set_item("hits", s.hits)?;
        dict.set_item("misses", s.misses)?;
        dict.set_item("evictions", s.evictions)?;
        dict.set_item("entries", s.entries)?;
        dict.set_item("bytes", s.bytes)?;
        Ok(dict)
    }

    /// Drops every entry; counters are kept.
    fn clear(&self) {
        self.cache.clear();
    }

    /// `(tool_id, version)` of every entry, most recently used first.
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.cache.keys())
    }

    /// The entry-count bound.
    #[getter]
    fn max_entries(&self) -> usize {
        self.cache.max_entries()
    }

    /// The byte bound.
    #[getter]
    fn max_bytes(&self) -> usize {
        self.cache.max_bytes()
    }

    fn __len__(&self) -> usize {
        self.cache.len()
    }

    fn __repr__(&self) -> String {
        let s = self.cache.stats();
        format!(
            "SchemaCache(entries={}/{}, bytes={}/{}, hits={}, misses={}, evictions={})",
            s.entries,
            self.cache.max_entries(),
            s.bytes,
            self.cache.max_bytes(),
            s.hits,
            s.misses,
            s.evictions
        )
    }
}

/// Adds `Bm25`, `analyze_text`, `fuse` and `SchemaCache` to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyBm25>()?;
    m.add_class::<PySchemaCache>()?;
    m.add_function(wrap_pyfunction!(fuse, m)?)?;
    m.add_function(wrap_pyfunction!(analyze_text, m)?)?;
    Ok(())
}
