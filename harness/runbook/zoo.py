"""The model zoo (runbooks/models.yaml): one top-level `models:` mapping model names to the
fields of harness.runbook.model.ModelSpec plus `arch`/`arch_source` (docs/runbook.md#architecture). Read here, bounded, for the runbook loader (which
types and checks an entry) and for `epcap forecast --model` (experts, top-k, hidden size).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.errors import BadInput
from harness.io.yamldoc import Doc, mapping, read_doc

ZOO = Path(__file__).resolve().parents[2] / "runbooks" / "models.yaml"   # the shipped zoo


@dataclass(frozen=True)
class Zoo:
    """A models file: its document (for file:line: field errors) and its `models:` mapping."""

    doc: Doc
    models: dict            # model name -> its fields, as written

    def entry(self, name: str, field: str | None = None) -> dict:
        """The fields of model `name`; BadInput naming the known models for any other."""
        if name not in self.models:
            raise BadInput(f"unknown model {name!r}; known: {', '.join(sorted(self.models))}",
                           path=str(self.doc.path), field=field)
        return self.models[name]


def read_zoo(path: Path = ZOO, field: str | None = "models_file") -> Zoo:
    """A models file, read bounded; nothing of its text is echoed until it is known to be
    one (a top-level `models:` mapping and nothing else). `field` names what pointed here."""
    doc = read_doc(Path(path), field, quote=False)
    if not isinstance(doc.data, dict) or set(doc.data) != {"models"} \
            or not isinstance(doc.data["models"], dict):
        # not (yet) known to be a models file: say nothing of what it holds
        raise BadInput("not a models file: expected one top-level key `models:` mapping model "
                       "names to their fields (see docs/runbook.md)", path=str(doc.path),
                       line=1, field=field)
    doc.quote = True
    return Zoo(doc, mapping(doc, doc.data["models"], ("models",), None))


def zoo_model(name: str, zoo: Path = ZOO) -> dict:
    """The zoo entry of a model (experts, topk, hidden, ...), for `epcap forecast --model`."""
    return read_zoo(zoo, "--model").entry(name, "--model")
