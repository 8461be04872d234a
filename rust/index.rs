//! An opened index: scanning, quantized scan with exact f32 re-scoring, gated top-k.
