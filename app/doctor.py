"""`hearth doctor`: what Hearth found on this machine, in a stable JSON shape documented in the README."""

from __future__ import annotations

import platform
import sqlite3
import sys
from importlib import metadata
from typing import Any

from app.paths import HearthPaths
from app.secret_store import keyring_report
from app.storage.db import check_file
from inference.ggml_backends import CpuKernelMemory, kernels_for_this_machine, ranked_variants
from inference.hardware import llama_backend, probe_hardware


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def database_check(paths: HearthPaths) -> dict[str, Any]:
    """Checks the file read-only: a diagnosis must not create, migrate or repair anything."""
    path = paths.db_path
    if not path.exists():
        return {"path": str(path), "exists": False, "ok": True, "result": "not created yet"}
    try:
        result = check_file(path)
    except sqlite3.Error as exc:
        result = f"unreadable: {exc}"
    return {"path": str(path), "exists": True, "ok": result == "ok", "result": result}


def collect_report(paths: HearthPaths) -> dict[str, Any]:
    hardware = probe_hardware()
    backend, backend_detail = llama_backend()
    keyring = keyring_report()
    kernels = (
        kernels_for_this_machine(CpuKernelMemory(paths.cpu_kernels_file))
        if backend != "unavailable"
        else None
    )
    return {
        "version": _version("hearth"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "llama_cpp_python": _version("llama-cpp-python"),
        "backend": {"name": backend, "detail": backend_detail},
        # The ggml CPU variant a runner starts on, why, and every variant this CPU can run, best first.
        "cpu_kernels": {
            "variant": kernels.variant if kernels else None,
            "reason": kernels.reason if kernels else backend_detail,
            "available": [v.name for v in ranked_variants()] if kernels else [],
        },
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "total_mib": g.total_mib,
                "free_mib": g.free_mib,
                "used_mib": g.used_mib,
                "driver_version": g.driver_version,
            }
            for g in hardware.gpus
        ],
        "gpu_reason": hardware.gpu_reason,
        "ram": {"total_mib": hardware.ram_total_mib, "available_mib": hardware.ram_available_mib},
        "cpu": {"physical": hardware.cpu_count_physical, "logical": hardware.cpu_count_logical},
        "keyring": {"backend": keyring.backend_name, "usable": keyring.usable, "reason": keyring.reason},
        "data_dir": str(paths.home),
        "database": database_check(paths),
    }


def format_report(report: dict[str, Any]) -> str:
    lines = [
        f"Hearth {report['version']} · Python {report['python']}"
        f" · llama-cpp-python {report['llama_cpp_python']}",
        f"Backend:   {report['backend']['name']} ({report['backend']['detail']})",
    ]
    kernels = report["cpu_kernels"]
    if kernels["variant"]:
        lines.append(f"CPU:       {kernels['variant']} kernels ({kernels['reason']})")
    if report["gpus"]:
        for g in report["gpus"]:
            lines.append(
                f"GPU {g['index']}:     {g['name']} · {g['free_mib']} MiB free of {g['total_mib']} MiB"
                f" · driver {g['driver_version']}"
            )
    else:
        lines.append(f"GPU:       none ({report['gpu_reason']})")
    ram = report["ram"]
    lines.append(f"RAM:       {ram['available_mib']} MiB available of {ram['total_mib']} MiB")
    kr = report["keyring"]
    usable = "works" if kr["usable"] else f"not usable: {kr['reason']}"
    lines.append(f"Keyring:   {kr['backend']} ({usable})")
    lines.append(f"Data:      {report['data_dir']}")
    db = report["database"]
    lines.append(f"Database:  {db['result']} ({db['path']})")
    return "\n".join(lines) + "\n"
