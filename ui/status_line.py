"""The status bar's permanent lines: the model's state, live VRAM from the monitor (or exactly why there is no
GPU to show), the last reply's speed and the local API server."""

from __future__ import annotations

import html

from PySide6.QtCore import QCoreApplication, QObject, Qt
from PySide6.QtWidgets import QLabel, QStatusBar

from app.chat.engine import ModelStatus
from app.qt.services import AppServices
from inference.hardware import HardwareReport
from inference.protocol import GenerationStats
from ui.local_server_panel import LocalServerIndicator

ERROR_MESSAGE_MS = 15_000
INFO_MESSAGE_MS = 5_000

MIB_PER_GIB = 1024


def _gib(mib: int) -> str:
    return f"{mib / MIB_PER_GIB:.1f}"


def describe_gpu(report: HardwareReport) -> tuple[str, str]:
    """(status bar text, tooltip detail). Never claims a GPU it could not read."""
    if not report.gpus:
        reason = report.gpu_reason or QCoreApplication.translate("StatusLine", "no GPU found")
        return QCoreApplication.translate("StatusLine", "No GPU: {reason}").format(reason=reason), reason
    used = sum(gpu.used_mib for gpu in report.gpus)
    free = sum(gpu.free_mib for gpu in report.gpus)
    total = sum(gpu.total_mib for gpu in report.gpus)
    text = QCoreApplication.translate("StatusLine", "VRAM {used} GiB used · {free} GiB free").format(
        used=_gib(used), free=_gib(free)
    )
    details = []
    for gpu in report.gpus:
        cuda = f", CUDA {gpu.cuda_driver_version}" if gpu.cuda_driver_version else ""
        details.append(
            QCoreApplication.translate(
                "StatusLine", "GPU {index}: {name}, {used} of {total} GiB used (driver {driver}{cuda})"
            ).format(
                index=gpu.index,
                name=gpu.name,
                used=_gib(gpu.used_mib),
                total=_gib(gpu.total_mib),
                driver=gpu.driver_version,
                cuda=cuda,
            )
        )
    if len(report.gpus) > 1:
        details.append(
            QCoreApplication.translate("StatusLine", "All GPUs: {total} GiB").format(total=_gib(total))
        )
    return text, "\n".join(details)


def plain_label(object_name: str) -> QLabel:
    label = QLabel()
    label.setObjectName(object_name)
    # Model names and backend notes come from GGUF metadata: never let a label parse them as HTML.
    label.setTextFormat(Qt.TextFormat.PlainText)
    return label


class StatusLine(QObject):
    def __init__(self, bar: QStatusBar, services: AppServices) -> None:
        super().__init__(bar)
        self._bar = bar
        self.status_known = False
        self.statusBackend = plain_label("statusBackend")
        self.statusGpu = plain_label("statusGpu")
        self.statusStats = plain_label("statusStats")
        bar.addPermanentWidget(self.statusBackend)
        bar.addPermanentWidget(self.statusGpu)
        bar.addPermanentWidget(self.statusStats)
        # Shows when the local API server is on, and when its requests are using the model.
        self.localServerIndicator = LocalServerIndicator(services)
        bar.addPermanentWidget(self.localServerIndicator)

    def show_error(self, message: str) -> None:
        self._bar.showMessage(message, ERROR_MESSAGE_MS)

    def show_info(self, message: str) -> None:
        self._bar.showMessage(message, INFO_MESSAGE_MS)

    def show_model_status(self, status: ModelStatus) -> None:
        self.status_known = True
        self.statusBackend.setText(status.summary)
        # Tooltips are rich text when they look like HTML, so the detail is escaped first.
        tips = "".join(f"<p>{html.escape(tip)}</p>" for tip in (status.detail, status.kernels) if tip)
        self.statusBackend.setToolTip(tips)
        if status.state == "failed" or (status.state == "ready" and status.detail):
            self.show_error(status.detail or status.summary)

    def show_gpu(self, report: HardwareReport) -> None:
        text, tip = describe_gpu(report)
        self.statusGpu.setText(text)
        self.statusGpu.setToolTip(f"<p>{html.escape(tip)}</p>" if tip else "")

    def show_reply_stats(self, stats: GenerationStats) -> None:
        self.statusStats.setText(
            self.tr("Last reply: TTFT {ttft} s · {rate} tok/s").format(
                ttft=f"{stats.time_to_first_token_s:.2f}", rate=f"{stats.tokens_per_second:.1f}"
            )
        )
