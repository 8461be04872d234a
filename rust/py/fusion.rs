//! `fuse`: dense and BM25 scores into one, and the fusion method names `route` shares.

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

use super::arrays::row_major;
use super::error::{invalid, type_name};
use crate::fusion::{self, FusionMethod, Normalizer};

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
    #[pyo3(from_py_with = super::args::integer)] top: i64,
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

/// Adds `fuse` to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(fuse, m)?)
}
