"""Reader for MLPerf ``:::MLLOG`` log files, shared by the checker and the reporter.

It accepts exactly what the official ``mlperf_logging`` parser accepts, so that
verdicts built on it match the official tools:

* the file is decoded as latin-1 (no byte sequence can fail to decode) and split
  into lines with universal newlines (``\\n``, ``\\r\\n`` and a lone ``\\r``);
* a line is an MLLOG line when it contains ``:::MLLOG `` (with the space);
  everything before the *last* occurrence is discarded, so prefixes such as
  ``0: `` from mpirun are fine; lines without the token are ignored;
* the remainder is stripped and decoded with the standard JSON decoder (which,
  like the official one, also takes ``NaN`` and ``Infinity``);
* ``time_ms``, ``key``, ``value`` and ``metadata`` must be present and
  ``time_ms`` must convert with ``float()``.

Where the official parser would record a parse error we record a
:class:`ParseError`; where it would crash (a missing member, a JSON value that
is not an object, a ``time_ms`` of the wrong type) we also record a
:class:`ParseError` but flag it ``official_crash=True``, so callers can explain
that the official checker stops with a traceback there.

Every record carries the physical line number (1-based, for messages a person
can jump to) and ``index``, the 0-based position among MLLOG lines, which is the
number the official checker prints.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterator, List, Optional, Tuple, Union

TOKEN = ":::MLLOG "
REQUIRED_MEMBERS = ("time_ms", "key", "value", "metadata")


@dataclass(frozen=True)
class Record:
    """One successfully parsed ``:::MLLOG`` event."""

    key: Any
    value: Any
    metadata: dict
    time_ms: float
    event_type: Any
    namespace: Any
    line: int
    index: int
    text: str
    raw_metadata: Any = None

    @property
    def metadata_is_dict(self) -> bool:
        return isinstance(self.raw_metadata, dict)


@dataclass(frozen=True)
class ParseError:
    """One MLLOG line that could not become a :class:`Record`."""

    line: int
    index: int
    text: str
    message: str
    kind: str
    official_crash: bool = False


@dataclass
class ParsedLog:
    """Result of :func:`parse_log`; unpacks as ``records, errors``."""

    records: List[Record] = field(default_factory=list)
    errors: List[ParseError] = field(default_factory=list)
    source: str = "<text>"
    mllog_lines: int = 0
    total_lines: int = 0

    def __iter__(self) -> Iterator[Any]:
        yield self.records
        yield self.errors

    @property
    def official_crash(self) -> Optional[ParseError]:
        """The first error at which the official parser would raise, if any."""
        for err in self.errors:
            if err.official_crash:
                return err
        return None


Source = Union[str, bytes, "os.PathLike[str]"]


def _describe_json_error(exc: json.JSONDecodeError) -> str:
    # Column is counted inside the JSON text, which is what a reader wants.
    return f"invalid JSON: {exc.msg} (column {exc.colno})"


def _parse_mllog_text(stripped: str, line_no: int, index: int) -> Union[Record, ParseError]:
    if not stripped.startswith(TOKEN):
        # Only happens when nothing but whitespace follows the token.
        return ParseError(line_no, index, stripped, "nothing after ':::MLLOG '", "empty")
    body = stripped[len(TOKEN):]
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        return ParseError(line_no, index, stripped, _describe_json_error(exc), "json")
    except ValueError as exc:  # e.g. an integer literal beyond the digit limit
        return ParseError(line_no, index, stripped, f"invalid JSON: {exc}", "json")
    except RecursionError:
        return ParseError(line_no, index, stripped, "invalid JSON: nested too deeply",
                          "json", official_crash=True)
    if not isinstance(obj, dict):
        return ParseError(line_no, index, stripped,
                          f"the event is a JSON {type(obj).__name__}, not an object",
                          "not_object", official_crash=True)
    missing = [m for m in REQUIRED_MEMBERS if m not in obj]
    if missing:
        return ParseError(line_no, index, stripped,
                          "the event lacks the member(s) " + ", ".join(repr(m) for m in missing),
                          "member", official_crash=True)
    raw_time = obj["time_ms"]
    try:
        time_ms = float(raw_time)
    except ValueError:
        return ParseError(line_no, index, stripped,
                          f"time_ms {raw_time!r} is not a number", "time_ms")
    except (TypeError, OverflowError):
        return ParseError(line_no, index, stripped,
                          f"time_ms {raw_time!r} is not a number", "time_ms",
                          official_crash=True)
    raw_meta = obj["metadata"]
    return Record(
        key=obj["key"],
        value=obj["value"],
        metadata=raw_meta if isinstance(raw_meta, dict) else {},
        time_ms=time_ms,
        event_type=obj.get("event_type"),
        namespace=obj.get("namespace"),
        line=line_no,
        index=index,
        text=stripped,
        raw_metadata=raw_meta,
    )


def parse_lines(lines, source: str = "<text>") -> ParsedLog:
    """Parse an iterable of text lines (already split, newlines kept or not)."""
    result = ParsedLog(source=source)
    index = 0
    line_no = 0
    for line_no, line in enumerate(lines, start=1):
        cut = line.rfind(TOKEN)
        if cut < 0:
            continue
        stripped = line[cut:].strip()
        item = _parse_mllog_text(stripped, line_no, index)
        index += 1
        if isinstance(item, Record):
            result.records.append(item)
        else:
            result.errors.append(item)
    result.mllog_lines = index
    result.total_lines = line_no
    return result


def parse_text(text: str, source: str = "<text>") -> ParsedLog:
    """Parse log text; line breaks follow universal-newline rules."""
    return parse_lines(io.StringIO(text, newline=None), source)


def parse_bytes(data: bytes, source: str = "<bytes>") -> ParsedLog:
    """Parse raw log bytes, decoded as latin-1 like the official parser."""
    return parse_text(data.decode("latin-1"), source)


def parse_file(path: Union[str, "os.PathLike[str]"]) -> ParsedLog:
    """Parse a log file. OSError (missing file, directory, ...) propagates."""
    with open(path, encoding="latin-1", newline=None) as handle:
        return parse_lines(handle, os.fspath(path))


def parse_log(source: Source) -> ParsedLog:
    """Parse a log given as a path, raw bytes, or text.

    A ``str`` is taken as log text when it contains a line break or the MLLOG
    token, and as a path otherwise.  Returns a :class:`ParsedLog`, which also
    unpacks as ``records, errors``.
    """
    if isinstance(source, bytes):
        return parse_bytes(source)
    if isinstance(source, str) and ("\n" in source or "\r" in source or TOKEN in source):
        return parse_text(source)
    return parse_file(source)


def iter_key(records: List[Record], key: str) -> Iterator[Record]:
    """The records with the given key, in file order."""
    return (r for r in records if r.key == key)


__all__ = [
    "TOKEN", "Record", "ParseError", "ParsedLog", "parse_log", "parse_text",
    "parse_bytes", "parse_file", "parse_lines", "iter_key",
]
