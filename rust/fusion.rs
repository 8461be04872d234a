//! Normalised fusion of dense and BM25 scores.
