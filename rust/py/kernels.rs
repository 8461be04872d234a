//! Kernel selection and raw scans, for tests and benchmarks: the private module
//! `toolgate._toolgate._testing`.
//!
//! Arrays cross without copies (`as_slice` on the numpy buffer) and the GIL is released for
//! the O(N) work. Every shape is checked here, so the core's shape assertions never fire.

use numpy::ndarray::Array2;
use numpy::{Element, IntoPyArray, PyArray1, PyArray2, PyReadonlyArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

use super::arrays::{describe, row_major};
use super::error::invalid;
use crate::kernels::{self, Isa};

/// Names of the instruction sets the running CPU can execute, best first.
#[pyfunction]
fn available_isas() -> Vec<&'static str> {
    Isa::available().into_iter().map(Isa::name).collect()
}

/// Name of the instruction set the scans currently use.
#[pyfunction]
fn active_isa() -> &'static str {
    kernels::active().name()
}

/// Forces every later scan onto the named instruction set; `None` restores auto-detection.
#[pyfunction]
fn force_isa(name: Option<&str>) -> PyResult<()> {
    let isa = name.map(Isa::parse).transpose()?;
    Ok(kernels::force(isa)?)
}

/// Scores of one query against every row: `out[i] = dot(query, rows[i])` (times `scales[i]`
/// for int8).
#[pyfunction]
#[pyo3(signature = (query, rows, dtype = "f32", scales = None, *, padded = false))]
fn scan<'py>(
    py: Python<'py>,
    query: &Bound<'py, PyAny>,
    rows: &Bound<'py, PyAny>,
    dtype: &str,
    scales: Option<&Bound<'py, PyAny>>,
    padded: bool,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let query = extract_f32::<numpy::Ix1>(query, "query", "1-D")?;
    let (scores, _) = scan_any(py, row_major(&query, "query")?, 1, rows, dtype, scales, padded)?;
    Ok(scores.into_pyarray(py))
}

/// Scores of several queries (an `(n_queries, d)` array) against every row, reading each
/// block of rows once for the whole batch; returns `(n_queries, n_rows)`.
#[pyfunction]
#[pyo3(signature = (queries, rows, dtype = "f32", scales = None, *, padded = false))]
fn scan_batch<'py>(
    py: Python<'py>,
    queries: &Bound<'py, PyAny>,
    rows: &Bound<'py, PyAny>,
    dtype: &str,
    scales: Option<&Bound<'py, PyAny>>,
    padded: bool,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let queries = extract_f32::<numpy::Ix2>(queries, "queries", "2-D")?;
    let n_queries = queries.shape()[0];
    let flat = row_major(&queries, "queries")?;
    let (scores, n_rows) = scan_any(py, flat, n_queries, rows, dtype, scales, padded)?;
    let scores = Array2::from_shape_vec((n_queries, n_rows), scores)
        .expect("scan_any returns n_queries * n_rows scores");
    Ok(scores.into_pyarray(py))
}

/// Sum of every value of a float32 array, read as fast as memory allows: the floor a scan of
/// the same bytes cannot beat.
#[pyfunction]
fn read_probe(py: Python<'_>, rows: &Bound<'_, PyAny>) -> PyResult<f32> {
    let rows = extract_f32::<numpy::IxDyn>(rows, "rows", "")?;
    let values = row_major(&rows, "rows")?;
    Ok(py.detach(|| kernels::read_probe_f32(values)))
}

/// Dot product of two float32 vectors of equal length.
#[pyfunction]
fn dot(a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<f32> {
    let a = extract_f32::<numpy::Ix1>(a, "a", "1-D")?;
    let b = extract_f32::<numpy::Ix1>(b, "b", "1-D")?;
    let (a, b) = (row_major(&a, "a")?, row_major(&b, "b")?);
    if a.len() != b.len() {
        return Err(invalid(format!("a has {} elements but b has {}", a.len(), b.len())));
    }
    Ok(kernels::dot_f32(a, b))
}

/// Upper bound on `|int8 score - f32 score|` for a row with this scale (see the core's
/// `kernels::i8_error_bound`).
#[pyfunction]
fn i8_error_bound(query: &Bound<'_, PyAny>, scale: f32) -> PyResult<f32> {
    let query = extract_f32::<numpy::Ix1>(query, "query", "1-D")?;
    let query = row_major(&query, "query")?;
    check_finite(query, 0, 1)?;
    Ok(kernels::i8_error_bound(query, scale))
}

/// Validates `rows` (and `scales`) for `dtype` against `n_queries` queries stored back to
/// back, then scans with the GIL released. Returns `n_queries x n_rows` scores and `n_rows`.
fn scan_any(
    py: Python<'_>,
    queries: &[f32],
    n_queries: usize,
    rows: &Bound<'_, PyAny>,
    dtype: &str,
    scales: Option<&Bound<'_, PyAny>>,
    padded: bool,
) -> PyResult<(Vec<f32>, usize)> {
    let dim = queries.len().checked_div(n_queries).unwrap_or(0);
    if n_queries > 0 && dim == 0 {
        return Err(invalid("queries have dimension 0".to_string()));
    }
    check_finite(queries, dim, n_queries)?;
    if dtype != "int8" && scales.is_some() {
        return Err(invalid(format!("scales only apply to dtype='int8', not {dtype:?}")));
    }
    match dtype {
        "f32" => {
            let rows = extract_rows::<f32>(rows, "float32")?;
            let (flat, n, stride) = row_layout(&rows, dim, n_queries, padded)?;
            let mut out = vec![0.0; n * n_queries];
            py.detach(|| kernels::scan_f32_batch(queries, n_queries, flat, stride, &mut out));
            Ok((out, n))
        }
        "bf16" => {
            let rows = extract_rows::<u16>(rows, "uint16 (raw bf16 bits)")?;
            let (flat, n, stride) = row_layout(&rows, dim, n_queries, padded)?;
            let mut out = vec![0.0; n * n_queries];
            py.detach(|| kernels::scan_bf16_batch(queries, n_queries, flat, stride, &mut out));
            Ok((out, n))
        }
        "int8" => {
            let rows = extract_rows::<i8>(rows, "int8")?;
            let (flat, n, stride) = row_layout(&rows, dim, n_queries, padded)?;
            let scales = scales.ok_or_else(|| invalid("dtype='int8' needs scales".to_string()))?;
            let scales = extract_f32::<numpy::Ix1>(scales, "scales", "1-D")?;
            let scales = row_major(&scales, "scales")?;
            if scales.len() != n {
                return Err(invalid(format!("{} scales for {n} rows", scales.len())));
            }
            let mut out = vec![0.0; n * n_queries];
            py.detach(|| {
                kernels::scan_i8_batch(queries, n_queries, flat, stride, scales, &mut out);
            });
            Ok((out, n))
        }
        other => Err(invalid(format!("dtype must be 'f32', 'int8' or 'bf16', not {other:?}"))),
    }
}

/// The rows' buffer, row count and stride, after checking they fit queries of `dim`.
fn row_layout<'a, T: Element>(
    rows: &'a PyReadonlyArray<'_, T, numpy::Ix2>,
    dim: usize,
    n_queries: usize,
    padded: bool,
) -> PyResult<(&'a [T], usize, usize)> {
    let (n, stride) = (rows.shape()[0], rows.shape()[1]);
    let fits = if padded { dim <= stride } else { dim == stride };
    if n_queries > 0 && !fits {
        let needed = if padded { "at most" } else { "exactly" };
        return Err(invalid(format!(
            "query has dimension {dim} but rows have dimension {stride} ({needed} {dim} needed)"
        )));
    }
    Ok((row_major(rows, "rows")?, n, stride))
}

fn extract_rows<'py, T: Element>(
    rows: &Bound<'py, PyAny>,
    expected: &str,
) -> PyResult<PyReadonlyArray<'py, T, numpy::Ix2>> {
    rows.extract().map_err(|_| {
        invalid(format!("rows must be a 2-D {expected} array, got {}", describe(rows)))
    })
}

fn extract_f32<'py, D: numpy::ndarray::Dimension>(
    obj: &Bound<'py, PyAny>,
    name: &str,
    ndim: &str,
) -> PyResult<PyReadonlyArray<'py, f32, D>> {
    obj.extract().map_err(|_| {
        let shape = if ndim.is_empty() { String::new() } else { format!("{ndim} ") };
        invalid(format!("{name} must be a {shape}float32 array, got {}", describe(obj)))
    })
}

/// Rejects NaN and infinities, naming the first offending element.
fn check_finite(values: &[f32], dim: usize, n_queries: usize) -> PyResult<()> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(at) if n_queries > 1 => Err(invalid(format!(
            "queries[{}, {}] is {}; queries must be finite",
            at / dim,
            at % dim,
            values[at]
        ))),
        Some(at) => Err(invalid(format!("query[{at}] is {}; queries must be finite", values[at]))),
    }
}

/// Adds the kernel functions to `m` (the private `_testing` module).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(available_isas, m)?)?;
    m.add_function(wrap_pyfunction!(active_isa, m)?)?;
    m.add_function(wrap_pyfunction!(force_isa, m)?)?;
    m.add_function(wrap_pyfunction!(scan, m)?)?;
    m.add_function(wrap_pyfunction!(scan_batch, m)?)?;
    m.add_function(wrap_pyfunction!(read_probe, m)?)?;
    m.add_function(wrap_pyfunction!(dot, m)?)?;
    m.add_function(wrap_pyfunction!(i8_error_bound, m)?)?;
    Ok(())
}
