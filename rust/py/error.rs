//! The exception tree rooted at `ToolgateError`, the mapping from the core's [`Error`], and
//! the helpers every binding uses to name bad input.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use crate::error::Error;

create_exception!(toolgate, ToolgateError, PyException, "Base class of every toolgate error.");
create_exception!(
    toolgate,
    IndexFormatError,
    ToolgateError,
    "An index file is not a well-formed toolgate index: wrong magic or version, truncated, corrupted."
);
create_exception!(
    toolgate,
    InvalidInputError,
    ToolgateError,
    "An argument has a value toolgate cannot use."
);

/// An `InvalidInputError` saying `message`.
pub(super) fn invalid(message: String) -> PyErr {
    InvalidInputError::new_err(message)
}

/// `type(obj).__name__`, for error messages.
pub(super) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map_or_else(|_| "object".to_string(), |n| n.to_string())
}

impl From<Error> for PyErr {
    fn from(err: Error) -> Self {
        match err {
            Error::Io { ref path, ref source } => match source.raw_os_error() {
                // OSError(errno, strerror, filename) picks the subclass (FileNotFoundError, ...).
                Some(errno) => pyo3::exceptions::PyOSError::new_err((
                    errno,
                    source.to_string(),
                    path.display().to_string(),
                )),
                None => pyo3::exceptions::PyOSError::new_err(err.to_string()),
            },
            Error::Format { .. } => IndexFormatError::new_err(err.to_string()),
            Error::InvalidArgument(_) => InvalidInputError::new_err(err.to_string()),
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("ToolgateError", py.get_type::<ToolgateError>())?;
    m.add("IndexFormatError", py.get_type::<IndexFormatError>())?;
    m.add("InvalidInputError", py.get_type::<InvalidInputError>())?;
    Ok(())
}
