//! int8 (per-row scale) and bf16 storage of f32 rows.
