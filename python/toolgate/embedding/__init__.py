"""Sentence embeddings: the model files, the ONNX encoder, the cache, clause vectors."""

import os as _os

# ONNX Runtime's telemetry off unless the user chose (see toolgate.embedding.runtime), set
# once here, at import: setting it later, from the thread that builds a session, would race
# every other thread's getenv (glibc's setenv is not thread safe).
_os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
