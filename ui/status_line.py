"""The status bar's GPU line: live VRAM from the monitor, or exactly why there is no GPU to show."""

from __future__ import annotations

from PySide6.QtCore import QCoreApplication

from inference.hardware import HardwareReport

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
