"""What produced a reply, enough to reproduce it: model file, quantisation, hash, template, sampling, seed."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QFormLayout, QLabel, QVBoxLayout, QWidget

from app.conversations.store import Message
from inference.protocol import SAMPLING_SETTINGS

SHA_PREFIX = 12
# The seed has a row of its own; what else a reply's sampling recorded follows these, by name.
SAMPLING_ORDER = tuple(name for name in SAMPLING_SETTINGS if name != "seed")


def _template(source: str | None) -> str:
    if not source:
        return QCoreApplication.translate("Provenance", "not recorded")
    if source == "gguf":
        return QCoreApplication.translate("Provenance", "from the model file (GGUF)")
    if source.startswith("fallback:"):
        return QCoreApplication.translate(
            "Provenance", "fallback {format} (the model's own template could not be used)"
        ).format(format=source.split(":", 1)[1])
    return source


def provenance_rows(message: Message, model_file: str | None) -> list[tuple[str, str]]:
    """(label, value) pairs, in the order shown; values are plain text."""
    unknown = QCoreApplication.translate("Provenance", "not recorded")
    sampling = message.sampling or {}
    shown = [f"{key} = {sampling[key]}" for key in SAMPLING_ORDER if key in sampling]
    shown += [f"{key} = {value}" for key, value in sorted(sampling.items()) if key not in SAMPLING_ORDER]
    rows = [(QCoreApplication.translate("Provenance", "Model"), message.model_name or unknown)]
    if message.server_name:
        # A server's reply: its file, quantization and template are the server's, not known here.
        rows.append(
            (
                QCoreApplication.translate("Provenance", "Server"),
                f"{message.server_name} ({message.server_url or unknown})",
            )
        )
    else:
        rows += [
            (QCoreApplication.translate("Provenance", "Model file"), model_file or unknown),
            (QCoreApplication.translate("Provenance", "Quantization"), message.quantization or unknown),
            (
                QCoreApplication.translate("Provenance", "SHA-256"),
                f"{message.model_sha256[:SHA_PREFIX]}…" if message.model_sha256 else unknown,
            ),
            (QCoreApplication.translate("Provenance", "Chat template"), _template(message.template)),
        ]
    rows += [
        (QCoreApplication.translate("Provenance", "Sampling"), ", ".join(shown) if shown else unknown),
        (
            QCoreApplication.translate("Provenance", "Seed"),
            str(message.seed) if message.seed is not None else unknown,
        ),
    ]
    if message.prompt_tokens is not None or message.completion_tokens is not None:
        rows.append(
            (
                QCoreApplication.translate("Provenance", "Tokens"),
                QCoreApplication.translate("Provenance", "{prompt} in, {completion} out").format(
                    prompt=message.prompt_tokens if message.prompt_tokens is not None else "?",
                    completion=message.completion_tokens if message.completion_tokens is not None else "?",
                ),
            )
        )
    if message.ttft_ms is not None:
        rows.append(
            (
                QCoreApplication.translate("Provenance", "Time to first token"),
                f"{message.ttft_ms / 1000:.2f} s",
            )
        )
    if message.tokens_per_second is not None:
        rows.append(
            (QCoreApplication.translate("Provenance", "Speed"), f"{message.tokens_per_second:.1f} tok/s")
        )
    if message.context_note:
        rows.append((QCoreApplication.translate("Provenance", "Context"), message.context_note))
    rows.append(
        (QCoreApplication.translate("Provenance", "Written"), f"{message.created_at:%Y-%m-%d %H:%M:%S} UTC")
    )
    return rows


class ProvenanceDialog(QDialog):
    def __init__(self, message: Message, model_file: str | None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("provenanceDialog")
        self.setWindowTitle(self.tr("How this reply was made"))
        self.rows = provenance_rows(message, model_file)
        self._sha = message.model_sha256 or ""
        form = QFormLayout()
        for label, value in self.rows:
            field = QLabel(value)
            # Plain text: model names, file names and notes come from files and from the model.
            field.setTextFormat(Qt.TextFormat.PlainText)
            field.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            field.setWordWrap(True)
            form.addRow(label, field)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy = buttons.addButton(self.tr("Copy"), QDialogButtonBox.ButtonRole.ActionRole)
        copy.setObjectName("copyProvenance")
        copy.clicked.connect(self.copy)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(buttons)

    def as_text(self) -> str:
        """Everything shown, with the full SHA-256 (the screen shows a prefix)."""
        lines = []
        for label, value in self.rows:
            if label == QCoreApplication.translate("Provenance", "SHA-256") and self._sha:
                value = self._sha
            lines.append(f"{label}: {value}")
        return "\n".join(lines)

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.as_text())
