//! toolgate core: everything on the per-turn routing hot path, free of Python.
//!
//! The binding layer in [`py`] is compiled only with the `python` feature, so `cargo test`
//! exercises this crate without libpython.

pub mod error;
pub mod kernels;

#[cfg(feature = "python")]
mod py;

pub use error::{Error, Result};
