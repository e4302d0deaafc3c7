"""Hearth's own OpenAI-compatible API on loopback. Sits above chat/: it serves through the engine."""
