//! The exception tree rooted at `ToolgateError`, the mapping from the core's [`Error`], and
//! the helpers every binding uses to name bad input.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};

use crate::error::Error;

create_exception!(toolgate, ToolgateError, PyException, "Base class of every toolgate error.");
create_exception!(
    toolgate,
    IndexFormatError,
    ToolgateError,
    "An index file is not a well-formed toolgate index: wrong magic or version, truncated, corrupted."
);

/// `InvalidInputError(ToolgateError, ValueError)`: a bad argument value, which code around
/// toolgate may catch as the `ValueError` Python raises for one. Made like `StorageError`.
pub(super) struct InvalidInputError;

static INVALID_INPUT_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

const INVALID_INPUT_ERROR_DOC: &str = "An argument has a value toolgate cannot use: both a \
ToolgateError and a ValueError.";

impl InvalidInputError {
    /// An `InvalidInputError` saying `message`.
    pub(super) fn new_err(message: impl Into<String>) -> PyErr {
        let message = message.into();
        Python::attach(|py| {
            match two_based_class(
                py,
                &INVALID_INPUT_ERROR,
                "InvalidInputError",
                INVALID_INPUT_ERROR_DOC,
                py.get_type::<PyValueError>(),
            ) {
                Ok(class) => PyErr::from_type(class.clone(), message),
                Err(failed) => failed,
            }
        })
    }
}

/// An `InvalidInputError` saying `message`.
pub(super) fn invalid(message: String) -> PyErr {
    InvalidInputError::new_err(message)
}

/// `type(obj).__name__`, for error messages.
pub(super) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type().name().map_or_else(|_| "object".to_string(), |n| n.to_string())
}

/// `StorageError(ToolgateError, OSError)`: `create_exception!` takes one base, so the class is
/// made once with `type()`. An `OSError` too, carrying `errno` and `filename`, so code that
/// catches `OSError` around file work keeps working.
static STORAGE_ERROR: PyOnceLock<Py<PyType>> = PyOnceLock::new();

const STORAGE_ERROR_DOC: &str = "A file cannot be read or written (missing, a directory, no \
permission, disk full...): both a ToolgateError and an OSError with errno and filename.";

fn storage_error(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    two_based_class(
        py,
        &STORAGE_ERROR,
        "StorageError",
        STORAGE_ERROR_DOC,
        py.get_type::<PyOSError>(),
    )
}

/// The class `name(ToolgateError, builtin)`, made once with `type()` into `cell`.
fn two_based_class<'py>(
    py: Python<'py>,
    cell: &'py PyOnceLock<Py<PyType>>,
    name: &str,
    doc: &str,
    builtin: Bound<'py, PyType>,
) -> PyResult<&'py Bound<'py, PyType>> {
    let class = cell.get_or_try_init(py, || -> PyResult<Py<PyType>> {
        let bases = PyTuple::new(py, [py.get_type::<ToolgateError>(), builtin])?;
        let namespace = PyDict::new(py);
        namespace.set_item("__module__", "toolgate")?;
        namespace.set_item("__doc__", doc)?;
        let made = py.get_type::<PyType>().call1((name, bases, namespace))?;
        Ok(made.cast_into::<PyType>()?.unbind())
    })?;
    Ok(class.bind(py))
}

impl From<Error> for PyErr {
    fn from(err: Error) -> Self {
        match err {
            Error::Io { ref path, ref source } => Python::attach(|py| {
                let class = match storage_error(py) {
                    Ok(class) => class,
                    Err(failed) => return failed,
                };
                // OSError(errno, strerror, filename) sets the three attributes.
                let path = path.display().to_string();
                match source.raw_os_error() {
                    Some(errno) => {
                        PyErr::from_type(class.clone(), (errno, source.to_string(), path))
                    }
                    None => PyErr::from_type(class.clone(), err.to_string()),
                }
            }),
            Error::Format { .. } => IndexFormatError::new_err(err.to_string()),
            Error::InvalidArgument(_) => InvalidInputError::new_err(err.to_string()),
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("ToolgateError", py.get_type::<ToolgateError>())?;
    m.add("IndexFormatError", py.get_type::<IndexFormatError>())?;
    let invalid_input = two_based_class(
        py,
        &INVALID_INPUT_ERROR,
        "InvalidInputError",
        INVALID_INPUT_ERROR_DOC,
        py.get_type::<PyValueError>(),
    )?;
    m.add("InvalidInputError", invalid_input)?;
    m.add("StorageError", storage_error(py)?)?;
    Ok(())
}
