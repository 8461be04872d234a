//! Scalar arguments read so that any value is an `InvalidInputError` or accepted: pyo3's own
//! conversions raise `OverflowError` for an integer past 64 bits and `UnicodeEncodeError` for
//! a string holding a lone surrogate, which are not `ToolgateError`s.

use std::path::PathBuf;

use pyo3::exceptions::{PyOverflowError, PyUnicodeError};
use pyo3::prelude::*;

use super::error::InvalidInputError;

/// A count that may be `None` (no limit); one past `i64::MAX` is as good as `i64::MAX`.
pub(super) fn optional_count(obj: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if obj.is_none() {
        return Ok(None);
    }
    integer(obj).map(Some)
}

/// An integer; past the 64-bit range, `i64::MAX` or `i64::MIN` (every caller bounds it).
pub(super) fn integer(obj: &Bound<'_, PyAny>) -> PyResult<i64> {
    match obj.extract::<i64>() {
        Ok(value) => Ok(value),
        Err(err) if err.is_instance_of::<PyOverflowError>(obj.py()) => {
            Ok(if obj.gt(0)? { i64::MAX } else { i64::MIN })
        }
        Err(_) => Err(InvalidInputError::new_err(format!("expected an integer, got {obj:.80}"))),
    }
}

/// `value` (read by [`integer`]) as a `usize`, or an `InvalidInputError` naming `what`.
pub(super) fn count(value: i64, what: &str) -> PyResult<usize> {
    usize::try_from(value).map_err(|_| {
        InvalidInputError::new_err(format!("{what} must be an integer >= 0, got {value}"))
    })
}

/// A string that UTF-8 can hold.
pub(super) fn text(obj: &Bound<'_, PyAny>) -> PyResult<String> {
    obj.extract::<String>().map_err(|err| unencodable(obj, &err))
}

/// A file-system path (`str` or `os.PathLike`).
pub(super) fn path(obj: &Bound<'_, PyAny>) -> PyResult<PathBuf> {
    obj.extract::<PathBuf>().map_err(|err| unencodable(obj, &err))
}

fn unencodable(obj: &Bound<'_, PyAny>, err: &PyErr) -> PyErr {
    if err.is_instance_of::<PyUnicodeError>(obj.py()) {
        InvalidInputError::new_err(format!(
            "{obj:.80} holds characters that cannot be encoded (a lone surrogate?): {err}"
        ))
    } else {
        InvalidInputError::new_err(format!("expected a string or a path, got {obj:.80}: {err}"))
    }
}
