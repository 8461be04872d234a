//! The bounded LRU schema cache.
