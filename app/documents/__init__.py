"""Documents: files people attach and folders they collect, read safely, cut into passages and retrieved
for a question."""

from app.documents.chunking import Chunk, chunk, estimate_tokens
from app.documents.extract import extract, extract_bytes
from app.documents.model import (
    DEFAULT_LIMITS,
    DocumentError,
    DocumentKind,
    ExtractedDocument,
    ExtractionLimits,
    Section,
)

__all__ = [
    "DEFAULT_LIMITS",
    "Chunk",
    "DocumentError",
    "DocumentKind",
    "ExtractedDocument",
    "ExtractionLimits",
    "Section",
    "chunk",
    "estimate_tokens",
    "extract",
    "extract_bytes",
]
