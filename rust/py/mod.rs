//! PyO3 bindings: the private extension module `toolgate._toolgate`.
//!
//! Binding functions stay thin: borrow numpy buffers without copying, release the GIL
//! around O(N) work, convert results after. All logic lives in the pure core.

mod args;
mod arrays;
mod errors;
mod index;
mod kernels;
mod route;
mod text;

use pyo3::prelude::*;

#[pymodule(gil_used = false)]
fn _toolgate(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    index::register(m)?;
    kernels::register(m)?;
    route::register(m)?;
    text::register(m)?;
    Ok(())
}
