//! Borrowing numpy buffers: typed, read-only, as row-major slices.

use numpy::ndarray::Dimension;
use numpy::{Element, PyArray1, PyArrayMethods, PyReadonlyArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

use super::error::InvalidInputError;

/// The elements of `array` in row-major order, without a copy; an error naming `what` unless
/// the array is C-contiguous and aligned for its dtype.
///
/// `as_slice` alone also accepts a Fortran-ordered array, whose memory runs column after
/// column: read as rows, it would silently score the wrong values.
pub(super) fn row_major<'a, T: Element, D: Dimension>(
    array: &'a PyReadonlyArray<'_, T, D>,
    what: &str,
) -> PyResult<&'a [T]> {
    if !array.is_c_contiguous() {
        return Err(InvalidInputError::new_err(format!(
            "{what} is not C-contiguous; pass np.ascontiguousarray({what})"
        )));
    }
    // Contiguous, so `as_slice` refuses only a data pointer misaligned for the dtype (a view
    // at an odd byte offset), which np.ascontiguousarray returns as it is.
    array.as_slice().map_err(|_| {
        InvalidInputError::new_err(format!(
            "{what} is not aligned for its dtype (a view at an odd byte offset?); pass \
             np.array({what}), an aligned copy"
        ))
    })
}

/// The elements of `array` in row-major order, copied, whatever its memory layout.
///
/// Never through `as_array`: rust-numpy divides numpy's byte strides by the item size and
/// takes the data pointer as aligned, so a field of a packed structured array (a stride that
/// is no multiple of the item size, at an odd address) was read at the wrong addresses, and
/// through misaligned references. numpy's own copy reads any layout.
pub(super) fn row_major_copy<T: Element + Copy, D: Dimension>(
    array: &PyReadonlyArray<'_, T, D>,
    what: &str,
) -> PyResult<Vec<T>> {
    if let Ok(values) = row_major(array, what) {
        return Ok(values.to_vec());
    }
    let copy = array.call_method1("copy", ("C",))?;
    let copy = borrow_array::<T, D>(&copy, what, "a numpy array")?;
    Ok(row_major(&copy, what)?.to_vec())
}

/// `score` applied to `query`, a 1-D float32 array borrowed without a copy, with the GIL
/// released: one score per stored row, as a new float32 array.
pub(super) fn query_scores<'py>(
    py: Python<'py>,
    query: &Bound<'py, PyAny>,
    score: impl Send + FnOnce(&[f32]) -> crate::Result<Vec<f32>>,
) -> PyResult<Bound<'py, PyArray1<f32>>> {
    let query = borrow_array::<f32, numpy::Ix1>(query, "query", "a 1-D float32 array")?;
    let values = row_major(&query, "query")?;
    let scores = py.detach(|| score(values))?;
    Ok(PyArray1::from_vec(py, scores))
}

/// Borrows `obj` as a numpy array of element `T` and dimensionality `D`, or explains what
/// was passed instead.
pub(super) fn borrow_array<'py, T: Element, D: Dimension>(
    obj: &Bound<'py, PyAny>,
    what: &str,
    expected: &str,
) -> PyResult<PyReadonlyArray<'py, T, D>> {
    match obj.cast::<numpy::PyArray<T, D>>() {
        Ok(array) => array.try_readonly().map_err(|err| {
            InvalidInputError::new_err(format!("{what} is being written elsewhere: {err}"))
        }),
        Err(_) => Err(InvalidInputError::new_err(format!(
            "{what} must be {expected}, got {}",
            describe(obj)
        ))),
    }
}

/// [`borrow_array`] of `obj` where given: `None` stays `None`.
pub(super) fn borrow_optional<'py, T: Element, D: Dimension>(
    obj: Option<&Bound<'py, PyAny>>,
    what: &str,
    expected: &str,
) -> PyResult<Option<PyReadonlyArray<'py, T, D>>> {
    obj.map(|obj| borrow_array(obj, what, expected)).transpose()
}

/// `an array of float64 with shape (3, 4)`, or the Python type name for anything else.
pub(super) fn describe(obj: &Bound<'_, PyAny>) -> String {
    let attr = |name: &str| obj.getattr(name).and_then(|value| value.str()).ok();
    match (attr("dtype"), attr("shape")) {
        (Some(dtype), Some(shape)) => format!("an array of {dtype} with shape {shape}"),
        _ => obj
            .get_type()
            .name()
            .map_or_else(|_| "an unknown object".into(), |name| name.to_string()),
    }
}
