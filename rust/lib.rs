//! toolgate core: everything on the per-turn routing hot path, free of Python.
//!
//! The binding layer in [`py`] is compiled only with the `python` feature, so `cargo test`
//! exercises this crate without libpython.

pub mod bm25;
pub mod cache;
pub mod error;
pub mod fusion;
pub mod gating;
pub mod index;
pub mod kernels;
pub mod learned;
pub mod matrix_file;
pub mod quantize;
pub mod route;
pub mod tokenize;
pub mod topk;

#[cfg(feature = "python")]
mod py;

pub use error::{Error, Result};
