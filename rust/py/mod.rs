//! PyO3 bindings: the private extension module `toolgate._toolgate`.
//!
//! One file per core module, named after it. Binding functions stay thin: borrow numpy
//! buffers without copying, release the GIL around O(N) work, convert results after. All
//! logic lives in the pure core. Hooks only tests and benchmarks use (forcing a kernel, raw
//! scans, the analyser) live in the submodule `toolgate._toolgate._testing`.

mod args;
mod arrays;
mod bm25;
mod cache;
mod error;
mod fusion;
mod gating;
mod index;
mod kernels;
mod learned;
mod route;
mod tokenize;

use pyo3::prelude::*;

#[pymodule(gil_used = false)]
fn _toolgate(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    error::register(m)?;
    index::register(m)?;
    bm25::register(m)?;
    fusion::register(m)?;
    cache::register(m)?;
    route::register(m)?;
    learned::register(m)?;
    add_testing(m)
}

/// Adds the submodule `_testing`, importable as `toolgate._toolgate._testing` too.
fn add_testing(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = parent.py();
    let testing = PyModule::new(py, "_testing")?;
    testing.gil_used(false)?;
    kernels::register(&testing)?;
    tokenize::register(&testing)?;
    parent.add_submodule(&testing)?;
    // An extension's submodule is an attribute only; `import a.b.c` looks in sys.modules.
    let name = format!("{}._testing", parent.name()?);
    py.import("sys")?.getattr("modules")?.set_item(name, testing)
}
