"""Every dataclass that travels in a workflow payload has evaluated annotations, not strings.

Temporal's data converter calls ``typing.get_type_hints`` on each dataclass it decodes; string annotations
(``from __future__ import annotations``) are compiled again on every call, which doubled the cost of decoding
a workflow's input.
"""

import dataclasses
import inspect
from types import ModuleType

import pytest

from ledger_deletion import contracts, request


@pytest.mark.parametrize("module", [contracts, request], ids=lambda m: m.__name__)
def test_payload_dataclasses_have_evaluated_annotations(module: ModuleType) -> None:
    classes = [
        cls
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__
    ]
    assert classes, f"no dataclasses found in {module.__name__}"
    as_strings = [
        f"{cls.__name__}.{f.name}"
        for cls in classes
        for f in dataclasses.fields(cls)
        if isinstance(f.type, str)
    ]
    assert not as_strings, f"string annotations (decoded slowly by the data converter): {as_strings}"
