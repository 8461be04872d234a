//! PyO3 bindings: the private extension module `toolgate._toolgate`.
//!
//! One file per core module, named after it. Binding functions stay thin: borrow numpy
//! buffers without copying, release the GIL around O(N) work, convert results after. All
//! logic lives in the pure core. Hooks only tests and benchmarks use (forcing a kernel, raw
//! scans, the analyser) live in the submodule `toolgate._toolgate._testing`, built only with
//! the feature `testing-hooks` (the development build's, not the release wheel's).

mod args;
mod arrays;
mod bm25;
mod cache;
mod error;
mod fusion;
mod gating;
mod index;
#[cfg(feature = "testing-hooks")]
mod kernels;
mod learned;
mod route;
#[cfg(feature = "testing-hooks")]
mod tokenize;

use pyo3::prelude::*;

#[pymodule(gil_used = false)]
fn _toolgate(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The index files' formats: a build that writes others must not share a folder of saved
    // routers with this one (a gateway's store names its routers by it), whatever its version.
    let formats =
        format!("matrix {} bm25 {}", crate::matrix_file::FORMAT_VERSION, crate::bm25::FILE_VERSION);
    m.add("INDEX_FORMATS", formats)?;
    error::register(m)?;
    index::register(m)?;
    bm25::register(m)?;
    fusion::register(m)?;
    cache::register(m)?;
    route::register(m)?;
    learned::register(m)?;
    #[cfg(feature = "testing-hooks")]
    add_testing(m)?;
    Ok(())
}

/// Adds the submodule `_testing`, importable as `toolgate._toolgate._testing` too. Set as an
/// attribute, not listed in `__all__`: the stubs of the release wheel, which has no hooks, then
/// need not name it.
#[cfg(feature = "testing-hooks")]
fn add_testing(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = parent.py();
    let testing = PyModule::new(py, "_testing")?;
    testing.gil_used(false)?;
    kernels::register(&testing)?;
    tokenize::register(&testing)?;
    parent.setattr("_testing", &testing)?;
    // An extension's submodule is an attribute only; `import a.b.c` looks in sys.modules.
    let name = format!("{}._testing", parent.name()?);
    py.import("sys")?.getattr("modules")?.set_item(name, testing)
}
