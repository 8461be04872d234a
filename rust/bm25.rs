//! BM25 over tool names, descriptions and parameter text.
