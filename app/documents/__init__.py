"""Documents: reading text out of the files people attach (PDF, Office, HTML, Markdown, text, code, EPUB)
safely, and cutting it into passages for retrieval. Pure Python: no Qt, no database."""

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
