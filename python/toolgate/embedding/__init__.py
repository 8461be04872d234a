"""Sentence embeddings: the model files, the ONNX encoder, the cache, clause vectors."""
