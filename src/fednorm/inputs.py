"""What a user hands in (YAML files, output folders), read so that every failure is one line.

A file that does not exist, cannot be read or is not valid YAML, and a folder that cannot be
created, are :class:`InputError`: the path, the YAML line and column where they apply, and what
to do. :func:`user_errors` turns those and :class:`~fednorm.config.ConfigError` into that one
line on stderr and a non-zero exit, for the command line and the Snakefile alike; with
``debug`` (``fednorm --debug``, or ``FEDNORM_DEBUG=1`` for the Snakefile) the traceback is kept.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from fednorm.config import ConfigError

DEBUG_VARIABLE = "FEDNORM_DEBUG"  # set (to anything but '' or 0): keep the traceback
USAGE_EXIT = 2  # a bad configuration, file or folder: what the user must change


class DatasetUnavailable(RuntimeError):
    """A dataset is not on disk (or its package is missing) and cannot be had here; the message
    says what to do (raised by fednorm.data's loaders)."""


class InputError(ValueError):
    """A file or folder the user named cannot be read, parsed or written. The message names
    the path (with the YAML line and column where they apply) and what to do."""


def _os_problem(err: OSError) -> str:
    """What an OSError says about its path, in words."""
    if isinstance(err, FileNotFoundError):
        return "no such file"
    if isinstance(err, IsADirectoryError):
        return "is a folder, not a file"
    if isinstance(err, PermissionError):
        return "permission denied"
    return err.strerror or type(err).__name__


def _yaml_problem(err: yaml.YAMLError) -> str:
    """A YAML error in one line: where the parser stopped (1-based line and column), what it
    found, and where the construct it was reading began."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem_mark is None:
        return " ".join(str(err).split())
    mark = err.problem_mark
    text = f"line {mark.line + 1}, column {mark.column + 1}: {err.problem}"
    if err.context and err.context_mark is not None:
        start = err.context_mark
        text += f" ({err.context} from line {start.line + 1}, column {start.column + 1})"
    return text


def read_yaml(path: str | os.PathLike[str], what: str = "YAML file") -> Any:
    """The content of a YAML file (an empty file is None); InputError when it cannot be read or
    parsed. ``what`` names the file's role in the message (e.g. 'claims file')."""
    try:
        data = Path(path).read_bytes()  # bytes: yaml reports a bad encoding with its position
    except OSError as err:
        raise InputError(f"{what} {path}: {_os_problem(err)}; pass the path of an existing, "
                         f"readable {what}") from err
    try:
        return yaml.safe_load(data)
    except yaml.YAMLError as err:
        raise InputError(f"{what} {path}: not valid YAML: {_yaml_problem(err)}; fix the file "
                         f"there") from err


def writable_folder(path: str | os.PathLike[str], option: str) -> Path:
    """Create the folder ``path`` (and its parents) if needed and check that it can be written;
    InputError naming the command-line ``option`` that gave it otherwise."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        problem = "a file is in the way" if isinstance(err, FileExistsError) else \
            err.strerror or type(err).__name__
        where = f" ({err.filename})" if err.filename and str(err.filename) != str(path) else ""
        raise InputError(f"{option} {path}: cannot create this folder: {problem}{where}; pass "
                         f"a folder that you can write") from err
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: this folder cannot be written (permission "
                         f"denied); pass a folder that you can write")
    return folder


@contextlib.contextmanager
def reading(path: str | os.PathLike[str], what: str, fix: str) -> Iterator[None]:
    """Around the code that reads one input file: whatever a malformed file makes it raise (a
    truncated archive, a wrong count, an HTML page saved under the file's name, a short line)
    becomes one InputError line naming ``what`` and ``path``, the problem, and ``fix`` (what to
    do); errors that already name their file (InputError, DatasetUnavailable) pass as
    raised."""
    try:
        yield
    except (InputError, DatasetUnavailable):
        raise
    except Exception as err:
        problem = (_os_problem(err) if isinstance(err, OSError) and not str(err).strip()
                   else " ".join(str(err).split()) or type(err).__name__)
        raise InputError(f"{what} {path} cannot be read ({type(err).__name__}: {problem}); "
                         f"{fix}") from err


def debugging() -> bool:
    """Whether ``FEDNORM_DEBUG`` asks for tracebacks."""
    return os.environ.get(DEBUG_VARIABLE, "") not in ("", "0")


@contextlib.contextmanager
def user_errors(debug: bool = False) -> Iterator[None]:
    """Within the block, a ConfigError or InputError becomes one line on stderr and exit 2, and
    any other OSError (a disk that fills up, a folder removed mid-way) one line and exit 1;
    with ``debug`` (or ``FEDNORM_DEBUG``) they propagate with their traceback."""
    if debug or debugging():
        yield
        return
    try:
        yield
    except ConfigError as err:
        _exit(f"configuration error: {err}", USAGE_EXIT)
    except InputError as err:
        _exit(str(err), USAGE_EXIT)
    except OSError as err:
        path = f"{err.filename}: " if err.filename else ""
        _exit(f"{path}{_os_problem(err)} (--debug or {DEBUG_VARIABLE}=1 shows where)", 1)


def _exit(message: str, code: int) -> None:
    print(f"fednorm: {message}", file=sys.stderr)
    raise SystemExit(code)
