//! `SchemaCache`: the bounded LRU of schema texts.
//!
//! The class is `frozen` over the internally locked core cache, so one instance may be shared
//! by any number of threads with or without the GIL; `fetch` runs without the cache's lock.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::error::{invalid, type_name};
use crate::cache::SchemaCache;

/// A catalog version as the core's `u64`, or an `InvalidInputError`.
fn extract_version(obj: &Bound<'_, PyAny>) -> PyResult<u64> {
    obj.extract::<u64>().map_err(|_| {
        invalid(format!(
            "version must be an int in [0, 2**64), got {}",
            obj.repr().map_or_else(|_| type_name(obj), |r| r.to_string())
        ))
    })
}

/// A thread-safe LRU cache of schema JSON strings keyed by (tool id, catalog version).
///
/// `SchemaCache(max_entries, max_bytes)` bounds both the entry count and the bytes held
/// (UTF-8 length of tool ids plus schemas). A schema bigger than `max_bytes` on its own is
/// returned by `get_or_fetch` but never cached.
#[pyclass(frozen, name = "SchemaCache", module = "toolgate._toolgate")]
struct PySchemaCache {
    cache: SchemaCache,
}

#[pymethods]
impl PySchemaCache {
    #[new]
    fn new(max_entries: &Bound<'_, PyAny>, max_bytes: &Bound<'_, PyAny>) -> PyResult<Self> {
        let bound = |obj: &Bound<'_, PyAny>, name: &str| {
            obj.extract::<usize>().ok().filter(|&n| n > 0).ok_or_else(|| {
                invalid(format!(
                    "{name} must be a positive int, got {}",
                    obj.repr().map_or_else(|_| type_name(obj), |r| r.to_string())
                ))
            })
        };
        let cache =
            SchemaCache::new(bound(max_entries, "max_entries")?, bound(max_bytes, "max_bytes")?)?;
        Ok(Self { cache })
    }

    /// The cached schema of `tool_id` at `version`, or None; counts a hit or a miss.
    fn get(&self, tool_id: &str, version: &Bound<'_, PyAny>) -> PyResult<Option<String>> {
        Ok(self.cache.get(tool_id, extract_version(version)?).map(|s| s.to_string()))
    }

    /// Caches `schema`; returns False (caching nothing) if it alone exceeds `max_bytes`.
    fn put(&self, tool_id: &str, version: &Bound<'_, PyAny>, schema: &str) -> PyResult<bool> {
        Ok(self.cache.insert(tool_id, extract_version(version)?, schema))
    }

    /// The cached schema, or else `fetch()` (called without the cache's lock), then cached.
    fn get_or_fetch(
        &self,
        tool_id: &str,
        version: &Bound<'_, PyAny>,
        fetch: &Bound<'_, PyAny>,
    ) -> PyResult<String> {
        let version = extract_version(version)?;
        if !fetch.is_callable() {
            return Err(invalid(format!("fetch must be callable, got {}", type_name(fetch))));
        }
        let schema = self.cache.get_or_fetch(tool_id, version, || -> PyResult<String> {
            let value = fetch.call0()?;
            value.extract::<String>().map_err(|_| {
                invalid(format!(
                    "fetch for {tool_id:?} (version {version}) returned {}, expected the schema \
                     as a str",
                    type_name(&value)
                ))
            })
        })?;
        Ok(schema.to_string())
    }

    /// Counters and sizes: hits, misses, evictions, entries, bytes.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.cache.stats();
        let dict = PyDict::new(py);
        dict.set_item("hits", s.hits)?;
        dict.set_item("misses", s.misses)?;
        dict.set_item("evictions", s.evictions)?;
        dict.set_item("entries", s.entries)?;
        dict.set_item("bytes", s.bytes)?;
        Ok(dict)
    }

    /// Drops every entry; counters are kept.
    fn clear(&self) {
        self.cache.clear();
    }

    /// `(tool_id, version)` of every entry, most recently used first.
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.cache.keys())
    }

    /// The entry-count bound.
    #[getter]
    fn max_entries(&self) -> usize {
        self.cache.max_entries()
    }

    /// The byte bound.
    #[getter]
    fn max_bytes(&self) -> usize {
        self.cache.max_bytes()
    }

    fn __len__(&self) -> usize {
        self.cache.len()
    }

    fn __repr__(&self) -> String {
        let s = self.cache.stats();
        format!(
            "SchemaCache(entries={}/{}, bytes={}/{}, hits={}, misses={}, evictions={})",
            s.entries,
            self.cache.max_entries(),
            s.bytes,
            self.cache.max_bytes(),
            s.hits,
            s.misses,
            s.evictions
        )
    }
}

/// Adds `SchemaCache` to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySchemaCache>()
}
