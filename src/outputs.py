"""A run's outputs, replaced as one set: OUT/results and OUT/plots hold either the whole previous
run or the whole new one, never a mix, whatever stops the run (Ctrl-C, SIGTERM, SIGKILL, a full
disk).
Files there that the run does not own (another command's outputs, the user's own) are kept.

`prepare(out)` runs before any simulation: it finishes the clean-up of an earlier run that was
killed, and refuses (ConfigError on --out) a folder the new outputs could not be written to.
`publish(out, files)` then writes every file into a staging folder inside OUT and swaps the
staged folders in by rename:

    1. OUT/.run-staging-ID/{results,plots}/...   every new file written (umask permissions), and
                                                 hard links to the old files the run does not own
    2. OUT/.run-swap-ID                          journal: the names being swapped
    3. per name: OUT/NAME -> OUT/.run-previous-ID.NAME, OUT/.run-staging-ID/NAME -> OUT/NAME
    4. remove the journal                        the commit point: the new set is final
    5. remove the previous and staging folders

A run holds OUT's lock (`locked`: fcntl.flock on the folder itself, so no lock file is left
behind) from reading the files it keeps, through the swap: two runs into one OUT swap one after
the other, and each keeps what the other published, read at that moment, not before it simulated.
A run that finds OUT locked says so once and waits up to LOCK_WAIT_S; then it refuses, leaving the
previous outputs as they were.

SIGINT and SIGTERM wait while steps 2-4 run. A run killed between 2 and 4 (SIGKILL) leaves the
journal; the next `prepare` rolls the swap back, restoring the whole previous set. ID is the
process id plus a random suffix; leftovers of processes still running are left alone.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import shutil
import signal
import time

from src.config import ConfigError

OWNED = ("results", "plots")  # the folders under OUT a run swaps
PREFIX = ".run-"
# the longest a run waits for another's swap into the same OUT: the swap itself takes well under
# a second, and what is done under the lock (reading the kept files, rendering the summary and
# plots that merge them) a few seconds; this leaves room for a machine under load
LOCK_WAIT_S = 300.0


def join_summary(parts) -> str:
    """summary.txt from its sections: one blank line between non-empty sections, one final
    newline. Every command that writes summary.txt joins through here, so a rerun is
    byte-identical whichever command wrote the file last."""
    return "\n\n".join(p.strip("\n") for p in parts if p.strip("\n")) + "\n"


BLOG_BLOCK_BEGIN = ("=== THE SERVING MODEL AGAINST THE vLLM BLOG (python -m src.online.blog_check)"
                    " ===")
BLOG_BLOCK_END = "=== END vLLM BLOG CHECK ==="


def block_last(summary: str) -> str:
    """`summary` with its blog-check block (if any) moved to the end, where every writer puts it,
    so that summary.txt is the same bytes whichever command ran last."""
    if BLOG_BLOCK_BEGIN not in summary or BLOG_BLOCK_END not in summary:
        return summary
    head, rest = summary.split(BLOG_BLOCK_BEGIN, 1)
    body, tail = rest.split(BLOG_BLOCK_END, 1)
    return join_summary([head, tail, BLOG_BLOCK_BEGIN + body + BLOG_BLOCK_END])


def replace_section(text: str, section: str, begin: str, end: str) -> str:
    """`text` (summary.txt) with the section between the lines `begin` and `end` replaced by
    `section` (which carries both marks), in place; appended where `text` has none. The one
    implementation behind each command's section of summary.txt."""
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        return join_summary([head, section, rest.split(end, 1)[1]])
    return join_summary([text, section])


def kept_summary_section(out_dir: str, begin: str, end: str) -> str | None:
    """The section between the lines `begin` and `end` (both kept) of OUT/results/summary.txt, or
    None: what a study run that rewrites the file keeps of another command's section."""
    try:
        with open(os.path.join(out_dir, "results", "summary.txt"), encoding="utf-8",
                  errors="replace") as f:
            summary = f.read()
    except OSError:
        return None
    if begin in summary and end in summary:
        return begin + summary.split(begin, 1)[1].split(end, 1)[0] + end
    return None


def existing_outputs(out_dir: str) -> dict[str, bytes]:
    """Every file now in OUT/results and OUT/plots (path relative to OUT -> bytes)."""
    files = {}
    for folder in ("results", "plots"):
        path = os.path.join(out_dir, folder)
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                full = os.path.join(path, name)
                if os.path.isfile(full) and not name.startswith("."):
                    with open(full, "rb") as fh:
                        files[f"{folder}/{name}"] = fh.read()
    return files


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _leftover_pid(name: str) -> int | None:
    """The process id in a staging/previous/journal name, or None if the name is not one."""
    for kind in ("staging-", "previous-", "swap-"):
        if name.startswith(PREFIX + kind):
            pid = name[len(PREFIX + kind):].split("-", 1)[0]
            return int(pid) if pid.isascii() and pid.isdigit() else None
    return None


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.remove(path)


def _roll_back(out: str, run_id: str) -> None:
    """Undo an interrupted swap (journal present): put every previous folder back."""
    journal = os.path.join(out, f"{PREFIX}swap-{run_id}")
    with open(journal) as f:
        names = [n for n in f.read().split() if n in OWNED]
    staging = os.path.join(out, f"{PREFIX}staging-{run_id}")
    for name in names:
        previous = os.path.join(out, f"{PREFIX}previous-{run_id}.{name}")
        moved_in = not os.path.exists(os.path.join(staging, name))
        if moved_in:
            _remove(os.path.join(out, name))
        if os.path.exists(previous):
            os.rename(previous, os.path.join(out, name))
    os.remove(journal)


def recover(out: str) -> None:
    """Finish what killed runs left in OUT: roll back interrupted swaps, remove staging and
    previous folders of processes that no longer run."""
    if not os.path.isdir(out):
        return
    entries = sorted(os.listdir(out))
    for name in entries:
        pid = _leftover_pid(name)
        if pid is not None and name.startswith(PREFIX + "swap-") and not _alive(pid):
            _roll_back(out, name[len(PREFIX + "swap-"):])
    for name in sorted(os.listdir(out)):
        pid = _leftover_pid(name)
        if pid is not None and not _alive(pid):
            _remove(os.path.join(out, name))


def _check_folder(path: str) -> None:
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError("--out", f"cannot write {path} (permission denied); make it writable or "
                                   "choose another --out")


# the longest path under OUT a run writes: OUT/.run-previous-PID-HEX.results/ and a file name
LONGEST_INSIDE = 100


def _check_name_lengths(out: str, existing: str) -> None:
    """Every folder name of OUT within the file system's NAME_MAX (255 bytes on Linux), and OUT
    short enough for the files inside it within PATH_MAX, so that creating OUT after the
    simulation cannot fail with 'File name too long'. ConfigError on --out."""
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
        path_max = os.pathconf(existing, "PC_PATH_MAX")
    except (OSError, ValueError):
        name_max, path_max = 255, 4096
    for name in os.path.abspath(out).split(os.sep):
        size = len(os.fsencode(name))
        if size > name_max:
            raise ConfigError("--out", f"the folder name '{name[:24]}...' is {size} bytes long; "
                                       f"allowed: at most {name_max} bytes a name (the file "
                                       "system's limit)")
    size = len(os.fsencode(os.path.abspath(out)))
    if size + LONGEST_INSIDE > path_max:
        raise ConfigError("--out", f"the path is {size} bytes long; allowed: at most "
                                   f"{path_max - LONGEST_INSIDE} bytes (the file system's "
                                   f"{path_max} less what a run writes inside it)")


def prepare(out: str) -> None:
    """Before simulating: clean up after killed runs, and make sure the outputs can be written.

    OUT (or, if it does not exist yet, its nearest existing parent) must be a writable folder, and
    so must OUT/results and OUT/plots where they exist. Raises ConfigError on --out."""
    if out.strip() == "":
        raise ConfigError("--out", "must name a folder (use --out . for the current folder)")
    for path in (out, *(os.path.join(out, n) for n in OWNED)):
        if os.path.lexists(path) and not os.path.isdir(path):
            raise ConfigError("--out", f"{path} exists and is not a folder")
    probe = os.path.abspath(out)
    while not os.path.exists(probe):  # the nearest existing ancestor must be a writable folder
        probe = os.path.dirname(probe)
    _check_name_lengths(out, probe)
    if not os.path.isdir(probe) or not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError("--out",
                          f"cannot create or write {out} ({probe} is not a writable folder)")
    if not os.path.isdir(out):
        return
    try:
        recover(out)
    except OSError as e:
        raise ConfigError("--out", f"cannot clean up after an earlier run in {out}: "
                                   f"{e.strerror or e}") from None
    for name in OWNED:
        folder = os.path.join(out, name)
        if os.path.isdir(folder):
            _check_folder(folder)


@contextlib.contextmanager
def locked(out: str, say=None, wait_s: float = LOCK_WAIT_S):
    """Hold OUT's exclusive lock inside the block (OUT is created if missing). Another run holding
    it: `say` one line, then wait up to wait_s and raise OSError(EBUSY) naming OUT. The lock is
    the kernel's (flock on the folder's descriptor): a killed run releases it. A file system that
    cannot lock runs unlocked, as before."""
    os.makedirs(out, exist_ok=True)
    fd = os.open(out, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        deadline = None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is None:
                    deadline = time.monotonic() + wait_s
                    if say:
                        say(f"waiting for another run that is writing its outputs into {out}")
                elif time.monotonic() > deadline:
                    raise OSError(errno.EBUSY, f"another run kept {out} locked for {wait_s:g} s; "
                                  "wait for it to finish or choose another --out") from None
                time.sleep(0.05)
            except OSError as e:
                if e.errno in (errno.ENOLCK, errno.EINVAL, errno.EOPNOTSUPP):
                    break  # no locks here: unlocked
                raise
        yield
    finally:
        os.close(fd)  # releases the lock


def _write_file(path: str, data: bytes) -> None:
    """A new file, folders as needed, with the permissions the umask gives (open's 0o666 &
    ~umask)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as e:  # a failed write (a full disk) names no file of its own
        if e.filename is None:
            e.filename = path
        raise


def write_error_line(e: OSError) -> str:
    """One line for an OSError while publishing: what could not be written and why, saying so
    plainly where the disk is full (errno ENOSPC, which str(e) gives as '[Errno 28] ...')."""
    why = "the disk is full" if e.errno == errno.ENOSPC else (e.strerror or str(e))
    where = f" ({os.path.basename(e.filename)}, in {os.path.dirname(e.filename)})" \
        if e.filename else ""
    return f"could not write the outputs{where}: {why}; previous outputs left as they were"


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        shutil.copy2(source, target, follow_symlinks=False)


def _keep(source: str, target: str) -> None:
    """target becomes another name of source (a copy where a hard link is not possible)."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.isdir(source) and not os.path.islink(source):
        shutil.copytree(source, target, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(source, target)


class _SignalsDeferred:
    """SIGINT and SIGTERM wait (are blocked) inside the block; delivered when it ends."""

    SIGNALS = {signal.SIGINT, signal.SIGTERM}

    def __enter__(self):
        self._old = signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS)

    def __exit__(self, *exc):
        signal.pthread_sigmask(signal.SIG_SETMASK, self._old)


def publish(out: str, files: dict[str, bytes], owns=lambda rel: True,
            after_commit=None) -> list[str]:
    """Replace OUT/results and OUT/plots by `files` ({path relative to OUT: bytes}), as one set.

    `owns(rel)` says which files belong to this kind of run: an old one the new set does not write
    again is stale and goes; every other old file in the two folders is kept.

    On an error before the commit (OSError: disk full, permissions) the staging folder is removed,
    the previous outputs stay as they were, and the error propagates. `after_commit`, if given,
    is called once the new set is final (before old folders are removed). Returns the paths
    written, joined to OUT."""
    names = sorted({rel.split("/", 1)[0] for rel in files})
    if any(n not in OWNED for n in names):
        raise ValueError(f"outputs must lie under {', '.join(OWNED)}: got {names}")
    os.makedirs(out, exist_ok=True)
    run_id = f"{os.getpid()}-{secrets.token_hex(4)}"
    staging = os.path.join(out, f"{PREFIX}staging-{run_id}")
    journal = os.path.join(out, f"{PREFIX}swap-{run_id}")
    try:
        os.mkdir(staging)
        for rel, data in files.items():
            _write_file(os.path.join(staging, rel), data)
        for name in OWNED:  # what the old folders hold that this run does not own
            folder = os.path.join(out, name)
            for entry in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
                rel = f"{name}/{entry}"
                if rel not in files and not owns(rel):
                    _keep(os.path.join(folder, entry), os.path.join(staging, rel))
        names = sorted(set(names) | {n for n in OWNED if os.path.isdir(os.path.join(staging, n))})
        swapped = [n for n in OWNED if n in names or os.path.isdir(os.path.join(out, n))]
        with _SignalsDeferred():
            with open(journal, "w") as f:
                f.write("\n".join(swapped) + "\n")
                f.flush()
                os.fsync(f.fileno())
            try:
                for name in swapped:
                    if os.path.isdir(os.path.join(out, name)):
                        os.rename(os.path.join(out, name),
                                  os.path.join(out, f"{PREFIX}previous-{run_id}.{name}"))
                    if name in names:
                        os.rename(os.path.join(staging, name), os.path.join(out, name))
            except BaseException:
                _roll_back(out, run_id)
                raise
            os.remove(journal)  # commit
            if after_commit:
                after_commit()
            for name in swapped:
                _remove(os.path.join(out, f"{PREFIX}previous-{run_id}.{name}"))
    finally:
        if os.path.lexists(staging):
            _remove(staging)
    return [os.path.join(out, rel) for rel in files]
