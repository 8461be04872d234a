//! Gating inputs from Python: flag numbers, row lists (allow, deny, rows to read) and the
//! per-row required-flag masks an index is built with.

use numpy::{PyArray2, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;

use super::arrays::{describe, row_major_copy};
use super::error::InvalidInputError;
use crate::gating::pack_masks;

/// Any iterable of integers (list, tuple, set, range, numpy integer array).
fn int_list(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<i64>> {
    let not_ints = |err: PyErr| {
        InvalidInputError::new_err(format!("{what} must be an iterable of integers: {err}"))
    };
    if obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(InvalidInputError::new_err(format!(
            "{what} must be an iterable of integers, got a str"
        )));
    }
    obj.try_iter()
        .map_err(not_ints)?
        .map(|item| item.and_then(|item| item.extract::<i64>()))
        .collect::<PyResult<Vec<i64>>>()
        .map_err(not_ints)
}

/// Row numbers in `0..n_rows`, as the core's `u32`.
pub(super) fn row_list(obj: &Bound<'_, PyAny>, what: &str, n_rows: usize) -> PyResult<Vec<u32>> {
    row_list_values(&int_list(obj, what)?, what, n_rows)
}

pub(super) fn row_list_values(values: &[i64], what: &str, n_rows: usize) -> PyResult<Vec<u32>> {
    values
        .iter()
        .map(|&row| match usize::try_from(row) {
            Ok(index) if index < n_rows => Ok(index as u32),
            _ => Err(InvalidInputError::new_err(format!(
                "{what} contains row {row}, but the index has {n_rows} rows (valid: 0..{n_rows})"
            ))),
        })
        .collect()
}

/// Flag numbers, non-negative and below 2^32.
pub(super) fn flag_list(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    int_list(obj, "flags")?
        .into_iter()
        .map(|flag| {
            u32::try_from(flag).map_err(|_| {
                InvalidInputError::new_err(format!("flags contains {flag}; flags are 0..2^32"))
            })
        })
        .collect()
}

/// Masks as an (N, W) uint64 array, or as one sequence of required flag numbers per row.
pub(super) fn extract_masks(obj: &Bound<'_, PyAny>, rows: usize) -> PyResult<(Vec<u64>, usize)> {
    if let Ok(array) = obj.cast::<PyArray2<u64>>() {
        let array = array.try_readonly().map_err(|err| {
            InvalidInputError::new_err(format!("masks is being written elsewhere: {err}"))
        })?;
        let [n, words] = [array.shape()[0], array.shape()[1]];
        if n != rows {
            return Err(InvalidInputError::new_err(format!(
                "masks has {n} rows, vectors has {rows}"
            )));
        }
        return Ok((row_major_copy(&array, "masks")?, words));
    }
    if obj.hasattr("dtype")? {
        return Err(InvalidInputError::new_err(format!(
            "masks must be a 2-D uint64 array (one row of mask words per vector) or a list of \
             flag lists, got {}",
            describe(obj)
        )));
    }
    let lists: Vec<Bound<'_, PyAny>> = obj.extract().map_err(|err| {
        InvalidInputError::new_err(format!("masks must be a sequence of flag lists: {err}"))
    })?;
    if lists.len() != rows {
        return Err(InvalidInputError::new_err(format!(
            "masks has {} rows, vectors has {rows}",
            lists.len()
        )));
    }
    let flags: Vec<Vec<u32>> = lists.iter().map(flag_list).collect::<PyResult<_>>()?;
    let widest = flags.iter().flatten().max().map_or(0, |&flag| flag as usize / 64 + 1);
    Ok((pack_masks(&flags, widest)?, widest))
}
