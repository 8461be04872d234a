//! `Bm25`: build, load, save, score, and the exact-name look-ups.
//!
//! The class is `frozen` over the immutable core index, so one instance may be shared by any
//! number of threads with or without the GIL. Scoring runs detached from the interpreter;
//! documents are validated here so bad input is an `InvalidInputError` naming the document
//! and field, never a panic.

use std::path::PathBuf;

use numpy::{IntoPyArray, PyArray1};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use super::error::{invalid, type_name};
use crate::bm25::{Bm25Index, Bm25Params, FieldWeights, ToolDocument};

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

/// `index` knowing the `exposed` names too, when given: a sequence of `(row, name)` pairs.
fn with_exposed_names(index: Bm25Index, exposed: Option<&Bound<'_, PyAny>>) -> PyResult<Bm25Index> {
    let Some(exposed) = exposed.filter(|obj| !obj.is_none()) else { return Ok(index) };
    let not_pairs = || {
        invalid(format!(
            "exposed_names must be a sequence of (row, name) pairs, got {}",
            type_name(exposed)
        ))
    };
    if exposed.is_instance_of::<PyString>() {
        return Err(not_pairs());
    }
    let mut pairs: Vec<(u32, String)> = Vec::new();
    for (at, item) in exposed.try_iter().map_err(|_| not_pairs())?.enumerate() {
        let item = item?;
        pairs.push(item.extract().map_err(|_| {
            invalid(format!(
                "exposed_names[{at}] must be a (row, name) pair with a row in 0..2^32, got {}",
                item.repr().map_or_else(|_| type_name(&item), |r| r.to_string())
            ))
        })?);
    }
    let pairs: Vec<(u32, &str)> = pairs.iter().map(|(row, name)| (*row, name.as_str())).collect();
    Ok(index.with_exposed_names(&pairs)?)
}

#[pymethods]
impl PyBm25 {
    /// Indexes `docs`, a sequence of dicts (`name` required; `description`, `param_text`,
    /// `server` optional strings) or tuples `(name, description, param_text, server)`.
    /// `exposed_names`: `(row, name)` pairs, the names the model sees where the catalog
    /// renamed a tool, for `rows_named` and `mentioned_names`; not saved with the index.
    #[staticmethod]
    #[pyo3(signature = (docs, *, k1 = 1.2, b = 0.75, field_weights = None, exposed_names = None))]
    fn build(
        py: Python<'_>,
        docs: &Bound<'_, PyAny>,
        k1: f32,
        b: f32,
        field_weights: Option<&Bound<'_, PyAny>>,
        exposed_names: Option<&Bound<'_, PyAny>>,
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
        Ok(Self { index: with_exposed_names(index, exposed_names)? })
    }

    /// Reads an index written by `save`; a damaged or foreign file raises `IndexFormatError`.
    /// `exposed_names` as for `build`: the file does not hold them.
    #[staticmethod]
    #[pyo3(signature = (path, *, exposed_names = None))]
    fn load(
        py: Python<'_>,
        #[pyo3(from_py_with = super::args::path)] path: PathBuf,
        exposed_names: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let index = py.detach(|| Bm25Index::load(&path))?;
        Ok(Self { index: with_exposed_names(index, exposed_names)? })
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

    /// Rows `name` names: the row whose exposed name equals it (else equals it ignoring case),
    /// else those whose tool name or `server/name` id does (else ignoring case).
    fn rows_named(&self, name: &str) -> Vec<u32> {
        self.index.rows_named(name)
    }

    /// Rows whose compound name, id or exposed name the query mentions verbatim (ignoring
    /// case).
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

/// Adds `Bm25` to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyBm25>()
}
