//! The one error type of the core. Each variant maps onto a Python exception in `py::errors`.

use std::path::PathBuf;

/// Everything the core can report. Messages name what is wrong and where, so they can be
/// shown to a user unchanged.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An operating-system I/O failure on `path`.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A file exists but is not a well-formed toolgate index (bad magic, truncated, corrupted,
    /// unsupported version, inconsistent header).
    #[error("{path}: {reason}")]
    Format { path: PathBuf, reason: String },

    /// A caller passed a value the core cannot use (wrong dimension, NaN in a query, k = 0 ...).
    #[error("{0}")]
    InvalidArgument(String),
}

/// Result alias used throughout the core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgument(message.into())
    }

    /// Shorthand for [`Error::Format`].
    pub fn format(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Self::Format { path: path.into(), reason: reason.into() }
    }
}
