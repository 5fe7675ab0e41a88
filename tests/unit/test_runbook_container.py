"""The runbook's `container:` section and `paths:` keys: a key nothing reads is an error,
with file:line: field (docs/runbook.md, docs/slurm.md#containers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import BadInput
from harness.runbook.load import load_runbook

ROOT = Path(__file__).resolve().parents[2]
TIERB = (ROOT / "runbooks" / "tierb-b200-gbs8.yaml").read_text()
CONTAINER = """container:
  engine: pyxis
  image: /lustre/fsw/moe/containers/megatron-moe-b200.sqsh
  mounts: ["/lustre/fsw/moe:/lustre/fsw/moe"]
"""


def book(tmp_path: Path, container: str = CONTAINER, extra: str = "",
         launcher: str = "slurm") -> Path:
    assert CONTAINER in TIERB
    text = TIERB.replace(CONTAINER, container).replace("launcher: slurm", f"launcher: {launcher}")
    (tmp_path / "models.yaml").write_text((ROOT / "runbooks" / "models.yaml").read_text())
    path = tmp_path / "rb.yaml"
    path.write_text(text + extra)
    return path


def refused(path: Path, field: str) -> str:
    with pytest.raises(BadInput) as err:
        load_runbook(path)
    assert err.value.field == field and err.value.line is not None, str(err.value)
    return str(err.value)


def test_shipped_tierb_container():
    rb = load_runbook(ROOT / "runbooks" / "tierb-b200-gbs8.yaml")
    assert rb.container.engine == "pyxis" and rb.container.image.endswith(".sqsh")
    assert rb.container.mounts == ("/lustre/fsw/moe:/lustre/fsw/moe",)


@pytest.mark.parametrize("container, field", [
    ("container: {engine: docker, image: x}\n", "container.engine"),
    ("container: {engine: pyxis}\n", "container.image"),
    ("container: {engine: none, image: /x.sqsh}\n", "container.engine"),
    ("container: {engine: pyxis, image: x, mounts: ['/a:/b,/c:/d']}\n", "container.mounts[0]"),
    ("container: {engine: pyxis, image: x, mounts: ['/a']}\n", "container.mounts[0]"),
    ("container: {engine: apptainer, image: x, executable: docker}\n", "container.executable"),
    ("container: {engine: pyxis, image: x, imgae: y}\n", "container.imgae"),
])
def test_container_errors(tmp_path, container, field):
    refused(book(tmp_path, container), field)


def test_container_needs_the_slurm_launcher(tmp_path):
    """Loads (`--launcher slurm` may override), then preflight refuses the local launcher."""
    from harness.campaign.preflight import check_launcher_setup
    rb = load_runbook(book(tmp_path, launcher="local"))
    with pytest.raises(BadInput) as err:
        check_launcher_setup(rb, "local")
    assert err.value.field == "container.engine"


def test_a_path_nothing_reads_is_an_error(tmp_path):
    path = book(tmp_path)
    text = path.read_text().replace("  data: mock", "  data: mock\n  container: /x.sqsh")
    path.write_text(text)
    assert "unknown key" in refused(path, "paths.container")


def test_apptainer_loads(tmp_path):
    rb = load_runbook(book(tmp_path, "container: {engine: apptainer, image: /c/m.sif, "
                                     "workdir: /w, executable: singularity}\n"))
    assert (rb.container.engine, rb.container.executable) == ("apptainer", "singularity")
