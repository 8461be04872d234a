//! Borrowing numpy buffers as row-major slices.

use numpy::ndarray::Dimension;
use numpy::{Element, PyReadonlyArray, PyUntypedArrayMethods};
use pyo3::PyResult;

use super::errors::InvalidInputError;

/// The elements of `array` in row-major order, without a copy; an error naming `what` unless
/// the array is C-contiguous.
///
/// `as_slice` alone also accepts a Fortran-ordered array, whose memory runs column after
/// column: read as rows, it would silently score the wrong values.
pub(super) fn row_major<'a, T: Element, D: Dimension>(
    array: &'a PyReadonlyArray<'_, T, D>,
    what: &str,
) -> PyResult<&'a [T]> {
    let c_order = array.is_c_contiguous();
    array.as_slice().ok().filter(|_| c_order).ok_or_else(|| {
        InvalidInputError::new_err(format!(
            "{what} is not C-contiguous; pass np.ascontiguousarray({what})"
        ))
    })
}
