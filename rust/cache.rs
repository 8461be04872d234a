//! The bounded LRU schema cache.
//!
//! Maps `(tool id, catalog version)` to a tool's full JSON schema text. Because the catalog
//! version is part of the key, a catalog that changed (and so bumped its version) can never
//! be served a schema cached for the old one; old entries simply age out.
//!
//! Bounded twice: by entry count and by bytes, where an entry's size is the UTF-8 length of
//! its tool id plus that of its schema (bookkeeping overhead is not counted). A schema larger
//! than the byte bound on its own is never cached: [`SchemaCache::insert`] reports it and
//! [`SchemaCache::get_or_fetch`] still returns it to the caller.
//!
//! One `parking_lot` mutex guards the state; every operation under it is O(1) and never
//! calls out, so the lock is held for microseconds. Fetching a missing schema happens outside
//! the lock (see [`SchemaCache::get_or_fetch`]).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{Error, Result};

/// Counters and sizes of a [`SchemaCache`] at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Look-ups that found their entry.
    pub hits: u64,
    /// Look-ups that did not.
    pub misses: u64,
    /// Entries removed to respect a bound (not replacements, not `clear`).
    pub evictions: u64,
    /// Entries held now.
    pub entries: usize,
    /// Bytes held now (tool ids plus schemas).
    pub bytes: usize,
}

/// A thread-safe LRU cache of schema texts keyed by tool id and catalog version.
#[derive(Debug)]
pub struct SchemaCache {
    max_entries: usize,
    max_bytes: usize,
    state: Mutex<Lru>,
}

impl SchemaCache {
    /// A cache holding at most `max_entries` entries and `max_bytes` bytes; both must be > 0.
    pub fn new(max_entries: usize, max_bytes: usize) -> Result<Self> {
        if max_entries == 0 || max_bytes == 0 {
            return Err(Error::invalid(format!(
                "cache bounds must be > 0, got max_entries={max_entries}, max_bytes={max_bytes}"
            )));
        }
        Ok(Self { max_entries, max_bytes, state: Mutex::new(Lru::default()) })
    }

    /// The entry-count bound.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// The byte bound.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// The schema of `tool_id` at `version`, marking it most recently used; counts a hit or
    /// a miss.
    pub fn get(&self, tool_id: &str, version: u64) -> Option<Arc<str>> {
        let mut lru = self.state.lock();
        match lru.find(tool_id, version) {
            Some(slot) => {
                lru.hits += 1;
                lru.touch(slot);
                Some(Arc::clone(&lru.slots[slot].schema))
            }
            None => {
                lru.misses += 1;
                None
            }
        }
    }

    /// Stores `schema` for `tool_id` at `version` as the most recently used entry, replacing
    /// any previous value and evicting least recently used entries until both bounds hold.
    /// Returns `false`, caching nothing, when the entry alone exceeds the byte bound.
    pub fn insert(&self, tool_id: &str, version: u64, schema: impl Into<Arc<str>>) -> bool {
        let schema = schema.into();
        let size = tool_id.len() + schema.len();
        if size > self.max_bytes {
            return false;
        }
        let mut lru = self.state.lock();
        if let Some(slot) = lru.find(tool_id, version) {
            lru.remove(slot);
        }
        while lru.len() >= self.max_entries || lru.bytes + size > self.max_bytes {
            let oldest = lru.tail;
            lru.remove(oldest);
            lru.evictions += 1;
        }
        lru.push_front(Arc::from(tool_id), version, schema);
        true
    }

    /// The cached schema, or else the result of `fetch`, which is then inserted. `fetch` runs
    /// without the cache's lock held, so it may be slow and may use this cache itself.
    /// Concurrent misses on one key may each call `fetch`; the last insert wins. An error
    /// from `fetch` is returned unchanged and nothing is cached.
    pub fn get_or_fetch<E>(
        &self,
        tool_id: &str,
        version: u64,
        fetch: impl FnOnce() -> Result<String, E>,
    ) -> Result<Arc<str>, E> {
        if let Some(schema) = self.get(tool_id, version) {
            return Ok(schema);
        }
        let schema: Arc<str> = fetch()?.into();
        self.insert(tool_id, version, Arc::clone(&schema));
        Ok(schema)
    }

    /// Removes every entry; counters are kept.
    pub fn clear(&self) {
        let mut lru = self.state.lock();
        let (hits, misses, evictions) = (lru.hits, lru.misses, lru.evictions);
        *lru = Lru { hits, misses, evictions, ..Lru::default() };
    }

    /// A snapshot of the counters and sizes.
    pub fn stats(&self) -> CacheStats {
        let lru = self.state.lock();
        CacheStats {
            hits: lru.hits,
            misses: lru.misses,
            evictions: lru.evictions,
            entries: lru.len(),
            bytes: lru.bytes,
        }
    }

    /// Number of entries held now.
    pub fn len(&self) -> usize {
        self.state.lock().len()
    }

    /// Whether the cache holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `(tool id, version)` of every entry, most recently used first.
    pub fn keys(&self) -> Vec<(String, u64)> {
        let lru = self.state.lock();
        let mut keys = Vec::with_capacity(lru.len());
        let mut slot = lru.head;
        while slot != NIL {
            let s = &lru.slots[slot];
            keys.push((s.tool_id.to_string(), s.version));
            slot = s.next;
        }
        keys
    }
}

const NIL: usize = usize::MAX;

/// One entry, linked into the recency list by slot index.
#[derive(Debug)]
struct Slot {
    tool_id: Arc<str>,
    version: u64,
    schema: Arc<str>,
    prev: usize,
    next: usize,
}

/// The unsynchronised LRU: a slab of slots forming a doubly linked list (head = most
/// recent), and an index from tool id to the `(version, slot)` pairs held for it. Keying the
/// index by id alone lets a look-up borrow `&str` without allocating a key.
#[derive(Debug)]
struct Lru {
    index: HashMap<Arc<str>, Vec<(u64, usize)>>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    head: usize,
    tail: usize,
    bytes: usize,
    hits: u64,
    misses: u64,
    evictions: u64,
}

impl Default for Lru {
    fn default() -> Self {
        Self {
            index: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            bytes: 0,
            hits: 0,
            misses: 0,
            evictions: 0,
        }
    }
}

impl Lru {
    fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    fn find(&self, tool_id: &str, version: u64) -> Option<usize> {
        let versions = self.index.get(tool_id)?;
        versions.iter().find(|&&(v, _)| v == version).map(|&(_, slot)| slot)
    }

    fn unlink(&mut self, slot: usize) {
        let (prev, next) = (self.slots[slot].prev, self.slots[slot].next);
        match prev {
            NIL => self.head = next,
            p => self.slots[p].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n].prev = prev,
        }
    }

    fn link_front(&mut self, slot: usize) {
        self.slots[slot].prev = NIL;
        self.slots[slot].next = self.head;
        match self.head {
            NIL => self.tail = slot,
            h => self.slots[h].prev = slot,
        }
        self.head = slot;
    }

    fn touch(&mut self, slot: usize) {
        if self.head != slot {
            self.unlink(slot);
            self.link_front(slot);
        }
    }

    fn push_front(&mut self, tool_id: Arc<str>, version: u64, schema: Arc<str>) {
        self.bytes += tool_id.len() + schema.len();
        let entry = Slot { tool_id: Arc::clone(&tool_id), version, schema, prev: NIL, next: NIL };
        let slot = match self.free.pop() {
            Some(free) => {
                self.slots[free] = entry;
                free
            }
            None => {
                self.slots.push(entry);
                self.slots.len() - 1
            }
        };
        self.index.entry(tool_id).or_default().push((version, slot));
        self.link_front(slot);
    }

    fn remove(&mut self, slot: usize) {
        self.unlink(slot);
        let entry = &mut self.slots[slot];
        self.bytes -= entry.tool_id.len() + entry.schema.len();
        // Drop the schema now rather than when the slot is reused.
        entry.schema = Arc::from("");
        let (tool_id, version) = (Arc::clone(&entry.tool_id), entry.version);
        if let Some(versions) = self.index.get_mut(&tool_id) {
            versions.retain(|&(v, _)| v != version);
            if versions.is_empty() {
                self.index.remove(&tool_id);
            }
        }
        self.free.push(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used() {
        let cache = SchemaCache::new(2, 1 << 20).unwrap();
        cache.insert("a", 1, "A");
        cache.insert("b", 1, "B");
        assert!(cache.get("a", 1).is_some());
        cache.insert("c", 1, "C");
        assert_eq!(cache.keys(), [("c".to_string(), 1), ("a".to_string(), 1)]);
        assert_eq!(cache.stats().evictions, 1);
    }

    #[test]
    fn bounds_bytes_and_skips_oversized_entries() {
        let cache = SchemaCache::new(100, 10).unwrap();
        assert!(cache.insert("a", 1, "1234"));
        assert!(cache.insert("b", 1, "1234"));
        assert!(cache.insert("c", 1, "12"));
        assert_eq!(cache.stats().bytes, 8);
        assert!(cache.get("a", 1).is_none());
        assert!(!cache.insert("d", 1, "1234567890"));
        assert_eq!(cache.len(), 2);
        let fetched = cache.get_or_fetch::<()>("d", 1, || Ok("1234567890".into())).unwrap();
        assert_eq!(&*fetched, "1234567890");
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn versions_are_separate_keys() {
        let cache = SchemaCache::new(10, 1000).unwrap();
        cache.insert("t", 1, "old");
        assert!(cache.get("t", 2).is_none());
        cache.insert("t", 2, "new");
        assert_eq!(cache.get("t", 1).as_deref(), Some("old"));
        assert_eq!(cache.get("t", 2).as_deref(), Some("new"));
        cache.insert("t", 2, "newer");
        assert_eq!(cache.get("t", 2).as_deref(), Some("newer"));
        assert_eq!(
            cache.stats(),
            CacheStats { hits: 3, misses: 1, evictions: 0, entries: 2, bytes: 10 }
        );
    }

    #[test]
    fn threads_keep_the_bounds() {
        let cache = SchemaCache::new(16, 600).unwrap();
        std::thread::scope(|scope| {
            for t in 0..8u64 {
                let cache = &cache;
                scope.spawn(move || {
                    for i in 0..2000u64 {
                        let id = format!("tool{}", (i * 7 + t) % 40);
                        let want = format!("{id}@{}", i % 3);
                        let got = cache.get_or_fetch::<()>(&id, i % 3, || Ok(want.clone()));
                        assert_eq!(*got.unwrap(), *want);
                        let stats = cache.stats();
                        assert!(stats.entries <= 16 && stats.bytes <= 600, "{stats:?}");
                    }
                });
            }
        });
        let stats = cache.stats();
        assert_eq!(stats.hits + stats.misses, 8 * 2000);
        let bytes: usize =
            cache.keys().iter().map(|(id, v)| id.len() * 2 + 1 + v.to_string().len()).sum();
        assert_eq!(bytes, stats.bytes);
    }

    #[test]
    fn reuses_slots_after_clear_and_eviction() {
        let cache = SchemaCache::new(3, 1000).unwrap();
        for round in 0..5u64 {
            for i in 0..7 {
                cache.insert(&format!("tool{i}"), round, "x");
            }
            assert_eq!(cache.len(), 3);
            cache.clear();
            assert!(cache.is_empty());
        }
        assert_eq!(cache.stats().evictions, 5 * 4);
    }
}
