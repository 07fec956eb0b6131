"""Where the Temporal server's CPU goes, A against C: perf samples of the dev server, by what it was doing.

    python bench/benchmark.py --n 1000 --skip-half --skip-b --skip-faults --pin-server --profile-server DIR
    python bench/server_profile.py DIR/a.data DIR/c.data

The first command records the dev server with ``perf record -F 997 --call-graph fp`` (Go keeps frame
pointers) during A's backlog and during C. This script symbolizes the samples and prints, per category (the
gRPC handler or queue processor a sample ran under, garbage collection, ...) and per named function
(``--function``, inclusive), milliseconds of server CPU per deletion (A) and per trivial workflow (C).

The ``temporal`` binary is stripped, so perf cannot name anything. Go keeps its own symbol table
(``.gopclntab``) for stack traces: it is read here directly (function entry offsets and names, Go 1.20+
layout). Only the busy window of each recording counts (the seconds with at least 60 % of the busiest
second's samples), so start-up and the benchmark's own reading of histories afterwards are left out.

This is how change 17 was found (docs/performance.md): 3 % of the server's CPU went to re-reading the
namespace's search attributes on every use.
"""

from __future__ import annotations

import argparse
import bisect
import shutil
import signal
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The first of these (in this order) that a stack contains names its category: the gRPC handler or queue
# processor the sample ran under, or garbage collection.
CATEGORIES = (
    "gcBgMarkWorker",
    "visibilityQueueTaskExecutor",
    "transferQueueActiveTaskExecutor",
    "timerQueueActiveTaskExecutor",
    "_HistoryService_RespondWorkflowTaskCompleted",
    "_HistoryService_RecordWorkflowTaskStarted",
    "_HistoryService_RecordActivityTaskStarted",
    "_HistoryService_RespondActivityTaskCompleted",
    "_HistoryService_StartWorkflowExecution",
    "_HistoryService_GetWorkflowExecutionHistory",
    "_HistoryService_",
    "_MatchingService_",
    "_WorkflowService_",
    "grpc/internal/transport",
)
GOPCLNTAB_MAGIC_GO120 = 0xFFFFFFF1
TEXT_FILE_OFFSET = 0x1000  # perf reports addresses as offsets into the file; .text starts here


def record(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """Start sampling ``pid`` into ``output``; stop with :func:`stop`."""
    perf = shutil.which("perf")
    if perf is None:
        raise SystemExit("--profile-server needs Linux perf (apt install linux-perf)")
    argv = [perf, "record", "-q", "-F", "997", "--call-graph", "fp", "-p", str(pid), "-o", str(output)]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(recording: subprocess.Popen[bytes]) -> None:
    recording.send_signal(signal.SIGINT)  # perf writes its file on SIGINT
    recording.wait(timeout=60)


class GoSymbols:
    """Function names of a (stripped) Go binary, from its ``.gopclntab`` section."""

    def __init__(self, binary: Path) -> None:
        data = binary.read_bytes()
        table = _section(data, ".gopclntab")
        (magic,) = struct.unpack_from("<I", table, 0)
        if magic != GOPCLNTAB_MAGIC_GO120:
            raise SystemExit(f"{binary}: .gopclntab magic {magic:#x}, expected a Go 1.20+ binary")
        nfunc, _nfiles, _text, names_at, _cu, _files, _pc, functab_at = struct.unpack_from("<8Q", table, 8)
        self.entries: list[int] = []
        self.names: list[str] = []
        for index in range(nfunc):
            entry, func_at = struct.unpack_from("<II", table, functab_at + 8 * index)
            (name_at,) = struct.unpack_from("<i", table, functab_at + func_at + 4)
            start = names_at + name_at
            self.entries.append(entry)
            self.names.append(table[start : table.index(b"\0", start)].decode("utf-8", "replace"))
        self._cache: dict[int, str] = {}

    def name(self, file_offset: int) -> str:
        found = self._cache.get(file_offset)
        if found is None:
            index = bisect.bisect_right(self.entries, file_offset - TEXT_FILE_OFFSET) - 1
            found = self._cache[file_offset] = self.names[index] if index >= 0 else "?"
        return found


def _section(elf: bytes, wanted: str) -> bytes:
    (shoff,) = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)

    def header(index: int) -> tuple[int, int, int]:
        name, _type, _flags, _addr, offset, size = struct.unpack_from(
            "<IIQQQQ", elf, shoff + index * shentsize
        )
        return name, offset, size

    _, names_offset, _ = header(shstrndx)
    for index in range(shnum):
        name, offset, size = header(index)
        end = elf.index(b"\0", names_offset + name)
        if elf[names_offset + name : end].decode() == wanted:
            return elf[offset : offset + size]
    raise SystemExit(f"no {wanted} section: not a Go binary?")


def busy_stacks(recording: Path, symbols: GoSymbols) -> list[list[str]]:
    """Symbolized call stacks (leaf first) of the samples in the recording's busy window."""
    argv = ["perf", "script", "-i", str(recording), "-F", "time,ip"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{recording}: perf script failed: {done.stderr.strip()[:300]}")
    script = done.stdout
    samples: list[tuple[float, list[str]]] = []
    for block in script.split("\n\n"):
        lines = block.strip().splitlines()
        if len(lines) < 2:
            continue
        when = float(lines[0].strip().rstrip(":"))
        samples.append((when, [symbols.name(int(line.split()[0], 16)) for line in lines[1:] if line.strip()]))
    if not samples:
        raise SystemExit(f"{recording}: no samples (was perf allowed to attach? see perf_event_paranoid)")
    per_second = Counter(int(when) for when, _ in samples)
    busiest = max(per_second.values())
    busy = [second for second, count in per_second.items() if count >= 0.6 * busiest]
    first, last = min(busy), max(busy)
    return [stack for when, stack in samples if first <= int(when) <= last]


def category(stack: list[str]) -> str:
    for name in CATEGORIES:
        for frame in reversed(stack):
            if name in frame:
                return name
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="perf recording of the server during A (a.data)")
    parser.add_argument("c", type=Path, help="perf recording of the server during C (c.data)")
    parser.add_argument("--n-a", type=int, default=1000, help="deletions in A's recording")
    parser.add_argument("--n-c", type=int, default=1000, help="trivial workflows in C's recording")
    parser.add_argument("--binary", type=Path, help="the temporal binary (default: the stack's)")
    parser.add_argument(
        "--function",
        action="append",
        default=[],
        help="also show this function's inclusive time (repeatable)",
    )
    args = parser.parse_args()
    binary = args.binary or _stack_binary()
    symbols = GoSymbols(binary)
    a, c = busy_stacks(args.a, symbols), busy_stacks(args.c, symbols)
    ms_a, ms_c = 1000 / 997 / args.n_a, 1000 / 997 / args.n_c  # one sample ~ 1.003 ms of CPU
    by_a, by_c = Counter(map(category, a)), Counter(map(category, c))
    print(f"{'server ms per workflow':<48} {'A':>7} {'C':>7} {'A-C':>7}")
    _row("total (busy window)", len(a) * ms_a, len(c) * ms_c)
    for name in sorted(set(by_a) | set(by_c), key=lambda n: -(by_a[n] * ms_a - by_c[n] * ms_c)):
        _row(name, by_a[name] * ms_a, by_c[name] * ms_c)
    for function in args.function:
        in_a = sum(1 for stack in a if any(function in frame for frame in stack))
        in_c = sum(1 for stack in c if any(function in frame for frame in stack))
        _row(function[:48], in_a * ms_a, in_c * ms_c)


def _row(name: str, a_ms: float, c_ms: float) -> None:
    print(f"{name:<48} {a_ms:7.2f} {c_ms:7.2f} {a_ms - c_ms:+7.2f}")


def _stack_binary() -> Path:
    from devstack.stack import _temporal_binary

    binary = _temporal_binary()
    if binary is None:
        raise SystemExit("no temporal binary: pass --binary")
    return Path(binary)


if __name__ == "__main__":
    main()
