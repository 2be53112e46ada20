"""Checks of command-line inputs, shared by ``python -m rlvr_lib``, ``python -m rlvr_lib.study`` and its modules.

A bad input is a usage error: the command prints one line naming the flag and
what is allowed (the library's ``"<name>=<value!r> is invalid: must be ..."``
format, `rlvr_lib.validation`) and exits with status 2, as argparse does, before
it creates any folder or file. So every check here runs before a command writes
anything, and a command turns only these errors into that line: an unexpected
exception while it runs is a bug and keeps its traceback.

* `OneLineParser`: an ``ArgumentParser`` whose errors are one line (argparse
  prints the usage first, many lines for these commands; ``--help`` shows it).
* ``type=`` callables for argparse: `int_at_least` (`COUNT`, `SEED`), `number_in`, `existing_file`.
* `check_model`, `check_out_folder`, `check_out_file`: paths and hub names.
* `flag_errors`: a ``with`` block that reports the library's ``ValueError``
  (a config's ``validate``, a registry lookup) as a `UsageError` naming the
  flag that set the offending field.
* `add_common_flags` and `prelude`: ``--import`` and ``--threads`` (`default_threads`, `apply_threads`), which
  every command takes and applies before anything else.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from rlvr_lib.validation import interval_text, invalid

HUB_TIMEOUT_S = 10.0
"""Seconds the hub may take to answer whether a model exists (an unreachable hub must not hang a command)."""


class UsageError(ValueError):
    """A bad command-line input; the command's ``main`` prints it as one line and exits with status 2."""


class OneLineParser(argparse.ArgumentParser):
    """``ArgumentParser`` whose usage errors are one line on stderr (``<prog>: error: <message>``), exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # A library message may hold a newline (a YAML parser's error does): keep the one line.
        message = re.sub(r"\s*\n\s*", " ", message.strip())
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# ------------------------------------------------------------------ argparse type= callables
def int_at_least(lo: int, hi: int | None = None):
    """``type=``: an integer ``>= lo`` (and ``<= hi`` when given; argparse names the flag in its error)."""
    allowed = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{text!r} is invalid: must be {allowed}")
        return value

    parse.__name__ = allowed.removeprefix("an ")
    return parse


COUNT = int_at_least(1)
"""``type=`` of counts (steps, problems, samples, sizes): an integer >= 1."""
SEED = int_at_least(0)
"""``type=`` of seeds: an integer >= 0."""


def number_in(lo: float | None, hi: float | None, *, lo_open: bool = False, hi_open: bool = False):
    """``type=``: a finite number in the interval (written as `rlvr_lib.validation.check_range` writes it)."""
    from rlvr_lib.validation import check_range

    def parse(text: str) -> float:
        try:
            return check_range("value", float(text), lo, hi, lo_open=lo_open, hi_open=hi_open)
        except ValueError:  # float('x') or out of range: one message for both
            interval = interval_text(lo, hi, lo_open=lo_open, hi_open=hi_open)
            raise argparse.ArgumentTypeError(f"{text!r} is invalid: must be a number in {interval}") from None

    parse.__name__ = "number"
    return parse


def existing_file(text: str) -> str:
    """``type=``: a path to an existing file (a config file to read)."""
    if not Path(text).is_file():
        why = "a folder" if Path(text).is_dir() else "no such file"
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: must be an existing file ({why})")
    return text


def existing_folder(text: str) -> str:
    """``type=``: a path to an existing folder (one to read from)."""
    if not Path(text).is_dir():
        why = "a file" if Path(text).exists() else "no such folder"
        raise argparse.ArgumentTypeError(f"{text!r} is invalid: must be an existing folder ({why})")
    return text


# ------------------------------------------------------------------ paths and models
def _check_writable_place(flag: str, value: str, path: Path) -> None:
    """Folder ``path`` (which may not exist yet) can be written: it, or its nearest existing ancestor, is a writable
    folder."""
    ancestor = path.absolute()
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise UsageError(str(invalid(flag, value, f"a path under a folder ({ancestor} is a file)")))
    # Try it rather than ask os.access: root passes os.access on read-only places such as /proc.
    # TemporaryFile is unnamed (O_TMPFILE) or removed at once: nothing is left behind.
    try:
        with tempfile.TemporaryFile(dir=ancestor):
            pass
    except OSError as err:
        raise UsageError(str(invalid(flag, value, f"a writable place ({ancestor}: {err.strerror})"))) from None


def check_out_folder(flag: str, value: str | None) -> None:
    """An output folder: absent or a folder (never a file), in a place that can be written."""
    if value is None:
        return
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise UsageError(str(invalid(flag, value, "a folder (a file of that name exists)")))
    _check_writable_place(flag, value, path)


def check_out_file(flag: str, value: str | None) -> None:
    """An output file (rewritten when it exists): not a folder, in a place that can be written."""
    if value is None:
        return
    path = Path(value).expanduser()
    if path.is_dir():
        raise UsageError(str(invalid(flag, value, "a file path (a folder of that name exists)")))
    _check_writable_place(flag, value, path.parent)  # where the file is (re)written: an existing file is no error


def _hub_problem(name: str) -> str | None:
    """Why hub model ``name`` cannot be loaded (``None``: it is cached, or the hub has it)."""
    from huggingface_hub import model_info, try_to_load_from_cache
    from huggingface_hub.errors import RepositoryNotFoundError

    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return None
    try:
        model_info(name, timeout=HUB_TIMEOUT_S)
    except RepositoryNotFoundError:
        return "there is no such folder and the hub has no such model"
    except Exception as err:  # noqa: BLE001 - offline, DNS, time-out, proxy, gated...: any failure is the reason
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"there is no such folder and the hub could not be reached: {reason}"
    return None


def check_model(flag: str, value: str | None) -> None:
    """``--model``: ``None`` (the embedded policy), a name of `rlvr_lib.policy.load.POLICY_NAMES` whose checkpoint
    is built, a checkpoint folder holding ``config.json``, or a hub name.

    A hub name not in the local cache is looked up on the hub with a time-out
    (`HUB_TIMEOUT_S`), so an unreachable hub gives this error instead of a hang
    or a transformers traceback.
    """
    if value is None:
        return
    from rlvr_lib.policy.load import POLICY_NAMES, resolve_policy_path

    if value in POLICY_NAMES:
        try:
            resolve_policy_path(value)
        except FileNotFoundError as err:
            raise UsageError(f"argument {flag}: {err}") from None
        return
    must = "a checkpoint folder holding config.json or a hub model name"
    path = Path(value).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            what = "a folder without config.json" if path.is_dir() else "a file"
            raise UsageError(str(invalid(flag, value, f"{must} ({what})")))
        return
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(value)  # "name" or "org/name": anything else can only have been a path
    except HFValidationError:
        raise UsageError(str(invalid(flag, value, f"{must} (no such folder)"))) from None
    problem = _hub_problem(value)
    if problem:
        raise UsageError(f"{invalid(flag, value, must)}; {problem}")


# ------------------------------------------------------------------ library errors as usage errors
_NAMED = re.compile(r"^(?:[A-Za-z_]\w*\.)?([A-Za-z_]\w*)=")
"""A library message's leading name (`rlvr_lib.validation.invalid`): ``TrainerConfig.lr=`` or ``rounds=``."""


@contextlib.contextmanager
def flag_errors(flags: Mapping[str, str], default: str) -> Iterator[None]:
    """Report a ``ValueError`` of the block as a `UsageError` naming the flag behind it.

    Args:
        flags: ``{field or argument name: flag}``: a message starting with
            ``<Class.>field=`` is about ``flags[field]``.
        default: The flag named when the message names no field in ``flags``.
    """
    try:
        yield
    except UsageError:
        raise
    except ValueError as err:
        message = str(err)
        if message.startswith("--"):  # already names its flag (e.g. "--set key='lrr' is invalid")
            raise UsageError(message) from None
        match = _NAMED.match(message)
        flag = flags.get(match.group(1), default) if match else default
        raise UsageError(f"argument {flag}: {message}") from None


def run_command(parser: argparse.ArgumentParser, argv) -> int:
    """Parse ``argv`` and run the chosen subcommand (``args.func``), turning a `UsageError` of the input checks
    (raised before the command created anything) into that subcommand's usage error (exit 2)."""
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as err:
        args.parser.error(str(err))


# ------------------------------------------------------------------ what every command does first: threads, plug-ins
LOCAL_PROCESS_ENV = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")
"""Variables a launcher sets to the number of processes on this host (torchrun and ``accelerate launch``:
``LOCAL_WORLD_SIZE``; Open MPI, MPICH), read in this order by `default_threads`."""


def host_cores() -> int:
    """The CPU cores this process may run on (its affinity mask, else ``os.cpu_count()``)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def local_processes(env=None) -> int:
    """The processes of this launch on this host: the first of `LOCAL_PROCESS_ENV` that is set, else 1."""
    env = os.environ if env is None else env
    for name in LOCAL_PROCESS_ENV:
        value = env.get(name, "").strip()
        if value.isdigit() and int(value) >= 1:
            return int(value)
    return 1


def default_threads(env=None, cores: int | None = None, processes: int | None = None) -> int:
    """``--threads``' default: ``OMP_NUM_THREADS`` when set (a choice made before the command ran; torchrun and
    ``accelerate launch`` set it to 1 for several processes unless it is set), else the host's cores divided by
    the processes on this host (``processes``, default `local_processes`), at least 1."""
    env = os.environ if env is None else env
    omp = env.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) >= 1:
        return int(omp)
    return max(1, (host_cores() if cores is None else cores) // (processes or local_processes(env)))


def apply_threads(threads: int) -> None:
    """``torch.set_num_threads(threads)`` and, while torch still allows it (before its first parallel work, once
    per process), ``torch.set_num_interop_threads(threads)``."""
    import torch

    torch.set_num_threads(threads)
    if torch.get_num_interop_threads() != threads:
        try:
            torch.set_num_interop_threads(threads)
        except RuntimeError:  # already set, or parallel work started (a second command in one process)
            pass


def add_common_flags(p: argparse.ArgumentParser, threads_type, threads_range: str) -> None:
    """The flags every command of ``python -m rlvr_lib`` and of ``python -m rlvr_lib.study`` takes: ``--import`` and
    ``--threads`` (``threads_type``: its ``type=``; ``threads_range``: the range its help names); `prelude` runs
    them."""
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import a plugin first (repeatable): a module name or a path to a .py file that registers "
                        "methods, tasks or rewards (installed packages' 'rlvr_lib.plugins' entry points load by "
                        "themselves)")
    p.add_argument("--threads", type=threads_type, default=None,
                   help="torch CPU threads (intra- and inter-op; default: OMP_NUM_THREADS if set, else the host's "
                        f"cores / the processes on this host); {threads_range}")


def prelude(func):
    """A command run after what every command does first: ``--threads`` applied, ``--import`` modules imported
    (before any name is resolved; `add_common_flags`)."""

    def run(args: argparse.Namespace) -> int:
        from rlvr_lib.plugins import PluginError, import_plugins

        apply_threads(args.threads if args.threads is not None else default_threads())
        try:
            import_plugins(args.imports, "--import")
        except PluginError as err:
            raise UsageError(f"argument {err}") from None
        return func(args)

    run.__name__ = run.__qualname__ = func.__name__
    run.__doc__ = func.__doc__
    return run
