//! Top-k selection with deterministic ties and an optional score threshold.
