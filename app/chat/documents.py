"""A turn's documents: what the model reads (app.documents.context) and what the turn stores with its
messages (the prompt's attachments, the reply's sources), for a local model and a server alike."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.conversations.records import Message
from app.conversations.store import PartInput
from app.documents.context import AttachedText, DocumentContext, Passage, plan
from app.documents.library import Attachment, DocumentLibrary
from app.documents.model import DocumentKind
from app.errors import HearthError
from app.images.prepare import DEFAULT_SIZING, IMAGE_KIND, ImageSizing
from app.library.installed import ModelLibrary
from inference.protocol import ImageInput

log = logging.getLogger("hearth.chat")


@dataclass(frozen=True)
class TurnDocuments:
    """What the user attached to this prompt, and the collections the chat answers from."""

    attachments: tuple[Attachment, ...] = ()
    collections: tuple[str, ...] = ()
    # Attached PDFs also as pictures of their pages, for a model that can see; None: as the settings say.
    pdf_pages: bool | None = None

    @property
    def empty(self) -> bool:
        return not self.attachments and not self.collections

    @property
    def images(self) -> tuple[Attachment, ...]:
        return tuple(a for a in self.attachments if a.kind == IMAGE_KIND)


@dataclass(frozen=True)
class PreparedDocuments:
    context: DocumentContext
    prompt_parts: tuple[PartInput, ...]
    reply_parts: tuple[PartInput, ...]
    images: tuple[ImageInput, ...] = ()  # the prompt's pictures, prepared for the model (only at Send)

    def prompt(self, question: str) -> str:
        return self.context.prompt(question)


def prepare(
    library: DocumentLibrary | None,
    documents: TurnDocuments,
    question: str,
    *,
    budget_tokens: int,
    count_tokens: Callable[[str], int],
    search: bool = True,
    pdf_pages: bool = False,
    sizing: ImageSizing = DEFAULT_SIZING,
) -> PreparedDocuments | None:
    """The turn's documents planned into `budget_tokens`, and its images prepared for a vision model.
    `search` False: the plan the context meter shows before Send, the same except that nothing is searched
    (see app.documents.context.plan); its pictures are prepared as Send would, so that they are counted
    (the library keeps them for the turn). `pdf_pages`: attached PDFs' first pages go as
    pictures too, after the attached pictures, each as large as `sizing` allows."""
    if documents.empty:
        return None
    if library is None:
        raise HearthError(
            "Documents cannot be used here: this Hearth was started without its document store."
        )
    texts = [library.attached_text(a.name, a.sha256) for a in documents.attachments if a.kind != IMAGE_KIND]
    found: list[Passage] = []
    for name in documents.collections if search else ():
        found += library.search_collection(name, question)
    context = plan(
        question,
        texts,
        budget_tokens=max(budget_tokens, 0),
        count_tokens=count_tokens,
        retrieve=library.retrieve,
        collection_passages=found,
        collection_names=documents.collections,
        search=search,
    )
    whole = {doc.sha256 for doc in context.whole}
    prompt_parts = tuple(
        PartInput("attachment", a.name, a.sha256, a.mime_type, {"kind": IMAGE_KIND})
        if a.kind == IMAGE_KIND
        else PartInput(
            "attachment",
            a.name,
            a.sha256,
            a.mime_type,
            {
                "kind": a.kind,
                "pages": a.pages,
                "chars": a.chars,
                "mode": "whole" if a.sha256 in whole else "retrieved",
            },
        )
        for a in documents.attachments
    )
    images = tuple(library.image_input(a.name, a.sha256, sizing) for a in documents.images)
    if pdf_pages:
        for a in documents.attachments:
            if a.kind == DocumentKind.PDF:
                images += library.page_inputs(a.name, a.sha256, sizing)
    attached = {a.sha256 for a in documents.attachments}
    reply_parts = tuple(
        PartInput(
            "source",
            p.name,
            # Only stored files can be referred to; a collection's file is where the user keeps it.
            p.content_sha256 if p.content_sha256 in attached else None,
            meta={
                "location": p.location,
                "score": round(p.score, 6),
                "collection": p.collection,
                "content_sha256": p.content_sha256,
            },
            text=p.text,
        )
        for p in context.passages
    )
    return PreparedDocuments(context, prompt_parts, reply_parts, images)


def prompt_attachments(message: Message) -> tuple[Attachment, ...]:
    """The files a stored prompt was sent with, as they are attached to a new one (editing it)."""
    return tuple(
        Attachment(
            part.name or "attachment",
            part.file_sha256,
            part.mime_type or "application/octet-stream",
            part.size_bytes or 0,
            str(part.meta.get("kind", "text")),
            pages if isinstance(pages := part.meta.get("pages"), int) else None,
            chars if isinstance(chars := part.meta.get("chars"), int) else 0,
        )
        for part in message.attachments
        if part.file_sha256
    )


def images_of(
    message: Message, library: DocumentLibrary | None, sizing: ImageSizing = DEFAULT_SIZING
) -> tuple[ImageInput, ...]:
    """The pictures an earlier prompt was sent with, prepared again: a follow-up question is often about
    them. An image whose file is gone is left out rather than failing the turn."""
    if library is None:
        return ()
    found: list[ImageInput] = []
    for part in message.attachments:
        if part.meta.get("kind") != IMAGE_KIND or not part.file_sha256:
            continue
        try:
            found.append(library.image_input(part.name or "image", part.file_sha256, sizing))
        except HearthError as exc:
            log.info("an earlier image is left out of the prompt: %s", exc)
    return tuple(found)


def local_image_refusal(library: ModelLibrary, model_name: str, names: Sequence[str]) -> str | None:
    """Why images cannot go to an installed model, naming the models that could see them; None for a
    vision model (one with its projector)."""
    installed = library.get(model_name)  # an unknown model is named as that first
    if installed.vision:
        return None
    return image_refusal(installed.name, [m.name for m in library.list_models() if m.vision], names)


def image_refusal(model_name: str, seeing: Sequence[str], names: Sequence[str] = ()) -> str:
    """The sentence for images a text-only installed model cannot be given: `seeing` names the installed
    models that can, `names` the images (none: before any is attached)."""
    these = f" ({', '.join(names)})" if names else ""
    which = (
        f"installed models that can see: {', '.join(seeing)}"
        if seeing
        else "send them to a vision model on a server, or import one with its projector (`hearth models "
        "import MODEL.gguf --mmproj FILE`)"
    )
    return f"{model_name} can't see images{these}: it is a text-only model ({which})."


def as_the_model_read_it(message: Message, library: DocumentLibrary | None) -> str:
    """An earlier prompt as the model was given it: attachments that went in whole go in whole again (a
    follow-up question is about the same text); passages found for an earlier question are not repeated."""
    whole = [p for p in message.attachments if p.meta.get("mode") == "whole" and p.file_sha256]
    if not whole or library is None:
        return message.content
    texts: list[AttachedText] = []
    for part in whole:
        assert part.file_sha256 is not None
        try:
            texts.append(library.attached_text(part.name or "attachment", part.file_sha256))
        except HearthError:
            continue
    return DocumentContext(whole=tuple(texts)).prompt(message.content)


def budget(n_ctx: int, prompt_tokens: int, reserve_tokens: int) -> int:
    """What the documents may take: the context after the prompt as it stands and the reply's reserve."""
    return n_ctx - prompt_tokens - reserve_tokens
