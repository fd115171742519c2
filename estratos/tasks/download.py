"""``estratos tasks download es``: fetch the Spanish benchmark data into the layout tasks/ reads.

Two public sources, both on GitHub:

* the Spanish SentEval / DiscoEval repository (``OpenCENIA/Spanish-Sentence-Evaluation``),
  fetched as one repository archive (``<base>/<repo>/archive/<commit>.zip``); its ``data/``
  folder holds ``senteval/`` and ``discoeval/``, copied unchanged (minus ``*.depecrated``);
* the Spanish part of X-Probe (``ltgoslo/xprobe``), fetched file by file
  (``<base>/<repo>/raw/<commit>/es/<task>/<split>.txt``) into ``senteval/Probing-xprobe/``.

Both are pinned to one commit (:data:`BENCHMARK_COMMIT`, :data:`XPROBE_COMMIT`), the one the
reference copy the project is tested against was taken from, and every file is verified
against that commit's copy before it is installed (sha256 for the files of the reference
copy, the git blob id for the rest, listed in the package's ``data/es-download.toml``), so a
changed upstream cannot change results unnoticed: a file that differs is an error unless the
caller accepts it (``allow_mismatch``, ``--allow-mismatch``).

Why it is built this way: downloads are large and links flaky, so every transfer goes to a
``.part`` file that a rerun continues with an HTTP ``Range`` request; files already complete
(matching the reference checksum) are skipped; the archive is checked (zip CRCs) before a
single file is unpacked, and each unpacked file appears by atomic rename, so the data folder
never holds half a file. Without network it fails within the connect timeout, with a message
that says so. Nothing beyond the standard library is used (urllib). Not pooch: it verifies
whole files fetched one by one, so the resumed ``.part`` transfers, the one archive checked
before any member is unpacked, the git blob ids and ``--allow-mismatch`` would all stay here
beside it, and a dependency would be added for the retry loop alone.
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import logging
import os
import posixpath
import sys
import zipfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Set, Tuple
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 only
    import tomli as tomllib

from estratos import __version__
from estratos.errors import DiskFull, DownloadError, EstratosError, InputError, OptionError
from estratos.files import create_beside, fsync_file, preallocate, publish, write_all
from estratos.registry import Registry
from estratos.vocab import DOWNLOADABLE

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://github.com"
DEFAULT_ES_DIR = Path("~/.cache/estratos/es")
BENCHMARK_REPO = "OpenCENIA/Spanish-Sentence-Evaluation"
XPROBE_REPO = "ltgoslo/xprobe"
#: the commit of each source the data is downloaded from (and verified against)
BENCHMARK_COMMIT = "810e44e77ceb550483c0e8a6c3a0b98b4391e827"
XPROBE_COMMIT = "6a3b0c97983ec0349a832b50450b870b485b613b"
XPROBE_TASKS: Tuple[str, ...] = (
    "bigram_shift", "coordination_inversion", "obj_number", "odd_man_out", "past_present",
    "sentence_length", "subj_number", "tree_depth", "word_content")
XPROBE_SPLITS: Tuple[str, ...] = ("tr", "va", "te")
XPROBE_DIR = "senteval/Probing-xprobe"
STAGING_DIR = ".estratos-download"
_CHUNK = 1 << 16

#: Large files of the pinned sources that the reference copy lacks; tasks/ falls back to
#: other splits when they are absent (see its docs), so a download that cannot fetch them
#: (a 404 from a mirror, no network) reports them instead of failing.
NOT_PUBLISHED: Tuple[str, ...] = (
    *(f"{XPROBE_DIR}/{t}/tr.txt" for t in XPROBE_TASKS),
    "senteval/PAWS/paraphrase_train.txt",
    "discoeval/SP/wiki/train.txt", "discoeval/SP/mlsum/train.txt",
    "discoeval/SP/thesis/train.txt", "discoeval/DC/wiki/train.txt",
)

#: the checksum manifest (package data): the pinned commits' digest of every file, by path
MANIFEST = "es-download.toml"


@functools.cache
def _manifest() -> Dict[str, Dict[str, str]]:
    """The manifest's ``sha256`` and ``git-blob`` tables, read once, on first use."""
    path = resources.files("estratos") / "data" / MANIFEST
    doc = tomllib.loads(path.read_text(encoding="utf-8"))
    pinned = {BENCHMARK_REPO: BENCHMARK_COMMIT, XPROBE_REPO: XPROBE_COMMIT}
    if doc.get("sources") != pinned:
        raise EstratosError(f"{path}: its checksums are for the commits {doc.get('sources')}, "
                            f"not those estratos downloads ({pinned})")
    return {"sha256": doc["sha256"], "git-blob": doc["git-blob"]}


class _ManifestTable(Mapping[str, str]):
    """One table of the manifest (relative path -> hex digest), read when first looked at."""

    def __init__(self, table: str) -> None:
        self.table = table

    def __getitem__(self, rel: str) -> str:
        return _manifest()[self.table][rel]

    def __iter__(self) -> Iterator[str]:
        return iter(_manifest()[self.table])

    def __len__(self) -> int:
        return len(_manifest()[self.table])


#: sha256 of each file of the reference copy the project is tested against (the pinned
#: commits' files); a downloaded file that differs is refused unless allow_mismatch
REFERENCE_SHA256: Mapping[str, str] = _ManifestTable("sha256")
#: git blob ids (``git hash-object``) of the pinned commits' other data files: the large files
#: the reference copy lacks, verified all the same when a download brings them
REFERENCE_GIT_BLOBS: Mapping[str, str] = _ManifestTable("git-blob")


@dataclass
class DownloadReport:
    """What :func:`download_es` did, and what the data folder still lacks."""

    data_dir: Path
    fetched: List[str] = field(default_factory=list)      # URLs transferred (fully or resumed)
    installed: List[str] = field(default_factory=list)    # files written into data_dir
    up_to_date: List[str] = field(default_factory=list)   # files already complete, kept
    mismatched: List[str] = field(default_factory=list)   # differ from the pinned commit's
    missing: List[str] = field(default_factory=list)      # expected but absent
    unpublished: List[str] = field(default_factory=list)  # absent, with a fallback
    #: why the files with a fallback were not fetched (None: they were asked for, or present)
    unreachable: Optional[str] = None

    @property
    def complete(self) -> bool:
        """True when nothing expected is missing (files never published do not count)."""
        return not self.missing

    def lines(self) -> List[str]:
        """A short human-readable summary (what the CLI prints)."""
        out = [f"data folder: {self.data_dir}",
               f"sources: {BENCHMARK_REPO}@{BENCHMARK_COMMIT[:12]}, "
               f"{XPROBE_REPO}@{XPROBE_COMMIT[:12]}",
               f"installed {len(self.installed)} files, {len(self.up_to_date)} already "
               f"up to date, {len(self.fetched)} downloads"]
        for path in self.mismatched:
            out.append(f"warning: {path} differs from the pinned commit's copy (kept: "
                       "--allow-mismatch); results on it are not comparable to the benchmark's")
        for path in self.missing:
            out.append(f"missing: {path}")
        if self.unpublished:
            why = f"; {self.unreachable}" if self.unreachable else ""
            out.append(f"absent, with a fallback ({len(self.unpublished)} files; tasks fall "
                       f"back to the splits that exist{why}): " + ", ".join(self.unpublished))
        return out


class _TqdmProgress:
    """One tqdm byte bar per download label (created on the label's first report)."""

    def __init__(self) -> None:
        self._bars: Dict[str, Any] = {}

    def __call__(self, label: str, done: int, total: Optional[int]) -> None:
        from tqdm import tqdm

        bar = self._bars.get(label)
        if bar is None:
            bar = self._bars[label] = tqdm(total=total, unit="B", unit_scale=True, desc=label,
                                           leave=False)
        bar.update(done - bar.n)
        if total is not None and done >= total:
            bar.close()


def sha256_file(path: os.PathLike | str) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def git_blob_id(path: os.PathLike | str) -> str:
    """The git blob id of a file (what ``git hash-object`` prints), read in chunks."""
    digest = hashlib.sha1()
    digest.update(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _member_digests(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Tuple[str, str]:
    """(sha256, git blob id) of one archive member, in one pass."""
    sha, blob = hashlib.sha256(), hashlib.sha1()
    blob.update(b"blob %d\0" % info.file_size)
    with zf.open(info) as src:
        for chunk in iter(lambda: src.read(1 << 20), b""):
            sha.update(chunk)
            blob.update(chunk)
    return sha.hexdigest(), blob.hexdigest()


def _digest_ok(rel: str, sha256: Callable[[], str], blob: Callable[[], str],
               reference: Mapping[str, str], blobs: Mapping[str, str]) -> bool:
    """Whether a file's digests match the pinned commit's copy of ``rel`` (a file the pinned
    commits do not hold never does)."""
    if rel in reference:
        return sha256() == reference[rel]
    if rel in blobs:
        return blob() == blobs[rel]
    return False


def verified(path: Path, rel: str, reference: Mapping[str, str],
             blobs: Mapping[str, str]) -> bool:
    """Whether the file at ``path`` is the pinned commit's copy of ``rel``."""
    return path.is_file() and _digest_ok(rel, lambda: sha256_file(path),
                                         lambda: git_blob_id(path), reference, blobs)


def _mismatch_error(paths: List[str]) -> DownloadError:
    shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    return DownloadError(
        f"{len(paths)} downloaded file(s) differ from the pinned commits' copies "
        f"({BENCHMARK_REPO}@{BENCHMARK_COMMIT[:12]}, {XPROBE_REPO}@{XPROBE_COMMIT[:12]}): "
        f"{shown}; nothing of them was installed. Check --base-url (a mirror of other "
        "data?), or pass --allow-mismatch to install them anyway (results computed on them "
        "record their own data digest)")


class _NotFound(Exception):
    """HTTP 404 (a file the source does not publish)."""


def _offline_message(url: str, reason: object) -> str:
    return (f"cannot reach {url} ({reason}). `estratos tasks download` needs internet access; "
            "on an offline machine, copy a downloaded data folder instead and pass it with "
            "--data-dir (a partial download is kept and resumed on the next run)")


def fetch(url: str, dest: Path, timeout: float = 10.0,
          progress: Optional[Callable[[int, Optional[int]], None]] = None) -> Path:
    """Download ``url`` to ``dest`` through ``dest.part``, resuming a previous partial transfer.

    A ``.part`` left by an interrupted run is continued with ``Range: bytes=N-``; a server that
    ignores the range restarts it. ``dest`` appears only once every byte has arrived.
    ``progress(done, total)`` is called as bytes arrive.
    """
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": f"estratos/{__version__}"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        resp = urlopen(Request(url, headers=headers), timeout=timeout)
    except HTTPError as exc:
        if exc.code == 416 and have:  # nothing left to send: the part is whole
            publish(part, dest)
            return dest
        if exc.code == 404:
            raise _NotFound(url) from None
        raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (TimeoutError, URLError, ConnectionError, http.client.HTTPException) as exc:
        raise DownloadError(_offline_message(url, getattr(exc, "reason", exc))) from None
    dest.parent.mkdir(parents=True, exist_ok=True)
    with resp:
        resumed = have > 0 and resp.status == 206
        if not resumed:
            have = 0
        length = resp.headers.get("Content-Length")
        total = have + int(length) if length is not None else None
        done = have
        try:
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | (0 if resumed else os.O_TRUNC), 0o666)
            try:
                offset = os.lseek(fd, 0, os.SEEK_END)
                if total is not None:  # the whole rest held first: a full disk stops here
                    preallocate(fd, offset, total - offset, folder=part.parent,
                                what=f"downloading {dest.name}")
                while True:
                    chunk = resp.read(_CHUNK)
                    if not chunk:
                        break
                    write_all(fd, chunk, offset=offset, folder=part.parent,
                              what=f"downloading {dest.name}")
                    offset += len(chunk)
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
                os.ftruncate(fd, offset)  # a shorter body than announced: no zeros kept
                fsync_file(fd)
            finally:
                os.close(fd)
        except DiskFull:
            raise
        except (TimeoutError, OSError, http.client.HTTPException) as exc:
            raise DownloadError(f"{url}: transfer interrupted after {done} bytes ({exc}); "
                                "run the same command again to resume") from None
    if total is not None and done != total:
        raise DownloadError(f"{url}: got {done} of {total} bytes; run the same command again "
                            "to resume")
    publish(part, dest)
    return dest


def _safe_relative(name: str, archive: Path) -> str:
    """A zip member name as a safe relative POSIX path (no absolute paths, no ``..``)."""
    norm = posixpath.normpath(name)
    if name.startswith("/") or norm.startswith("../") or norm == ".." or "\\" in name:
        raise InputError(f"unsafe member name {name!r} in the archive", archive)
    return norm


def archive_members(archive: Path) -> Dict[str, zipfile.ZipInfo]:
    """Map ``senteval/...`` / ``discoeval/...`` paths to the archive's members.

    The archive holds one top folder (``<repo>-<ref>/``) with ``data/`` inside; superseded
    ``*.depecrated`` files are left out. Raises :class:`DownloadError` on a corrupt archive.
    """
    try:
        with zipfile.ZipFile(archive) as zf:
            bad = zf.testzip()
            if bad is not None:
                raise DownloadError(f"{archive}: corrupt member {bad!r} (CRC mismatch)")
            members: Dict[str, zipfile.ZipInfo] = {}
            for info in zf.infolist():
                rel = _safe_relative(info.filename, archive)
                parts = rel.split("/")
                if info.is_dir() or len(parts) < 4 or parts[1] != "data":
                    continue
                if parts[2] not in ("senteval", "discoeval") or rel.endswith(".depecrated"):
                    continue
                members["/".join(parts[2:])] = info
    except zipfile.BadZipFile as exc:
        raise DownloadError(f"{archive}: not a valid zip archive ({exc})") from None
    if not members:
        raise DownloadError(f"{archive}: no data/senteval or data/discoeval folder inside")
    return members


def _install_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, target: Path) -> None:
    """Copy one member to ``target`` through a temporary file and an atomic rename (the
    umask's mode for a new file, the old file's mode for a replaced one)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_beside(target)
    try:
        try:
            preallocate(fd, 0, info.file_size, folder=target.parent,
                        what=f"unpacking {target.name}")
            offset = 0
            with zf.open(info) as src:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    write_all(fd, chunk, offset=offset, folder=target.parent,
                              what=f"unpacking {target.name}")
                    offset += len(chunk)
            os.ftruncate(fd, offset)
            fsync_file(fd)
        finally:
            os.close(fd)
        publish(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def unpack_archive(archive: Path, data_dir: Path, reference: Mapping[str, str],
                   report: DownloadReport, blobs: Optional[Mapping[str, str]] = None,
                   allow_mismatch: bool = False) -> None:
    """Verify the whole archive (zip CRCs, then each data file against the pinned commit's
    copy), then install each data file atomically. A file that differs raises
    :class:`DownloadError` before anything is installed, unless ``allow_mismatch``."""
    blobs = {} if blobs is None else blobs
    members = archive_members(archive)
    with zipfile.ZipFile(archive) as zf:
        differ: List[str] = []
        for rel, info in sorted(members.items()):
            sha, blob = _member_digests(zf, info)
            if not _digest_ok(rel, functools.partial(str, sha), functools.partial(str, blob),
                              reference, blobs):
                differ.append(rel)
        if differ and not allow_mismatch:
            raise _mismatch_error(differ)
        for rel, info in sorted(members.items()):
            target = data_dir / rel
            if rel not in differ and target.is_file() \
                    and target.stat().st_size == info.file_size \
                    and verified(target, rel, reference, blobs):
                report.up_to_date.append(rel)
                continue
            _install_member(zf, info, target)
            report.installed.append(rel)
        report.mismatched.extend(differ)


def registry_files(data_dir: Path, suites: Tuple[str, ...] = ("es-senteval", "es-discoeval")
                   ) -> Set[str]:
    """Files the task registry reads for the Spanish suites, relative to ``data_dir``.

    Asked from the registry itself (each spec's data format lists the files of every
    published split), so this report and ``estratos tasks check`` agree on what is expected.
    """
    from estratos.tasks import DataDirs, all_specs, task_root
    from estratos.tasks.formats import get_format

    dirs = DataDirs(default=data_dir)
    found: Set[str] = set()
    for spec in all_specs():
        if spec.suite not in suites:
            continue
        root = task_root(spec, dirs)
        for source in get_format(spec.format).sources(spec, root).values():
            for path in source.paths:
                try:
                    found.add(Path(path).relative_to(data_dir).as_posix())
                except ValueError:  # a file outside the data folder is not ours to fetch
                    continue
    return found


def download_es(data_dir: os.PathLike | str = DEFAULT_ES_DIR, base_url: str = DEFAULT_BASE_URL,
                timeout: float = 10.0, *, xprobe: bool = True, keep_archive: bool = False,
                reference: Optional[Mapping[str, str]] = None,
                progress: bool | Callable[[str, int, Optional[int]], None] = False,
                allow_mismatch: bool = False, blobs: Optional[Mapping[str, str]] = None,
                ) -> DownloadReport:
    """Download, verify and unpack the Spanish SentEval/DiscoEval data and Spanish X-Probe.

    ``data_dir`` receives ``senteval/`` and ``discoeval/`` (the folder ``--data-dir`` takes).
    ``base_url`` replaces ``https://github.com`` (a mirror, or a local server in tests);
    ``timeout`` bounds connecting and each read, so an offline machine fails fast.
    ``reference`` maps relative paths to expected sha256 and ``blobs`` to git blob ids
    (default: the pinned commits' files; ``blobs`` defaults to none when a ``reference`` is
    given). A file that matches neither raises :class:`DownloadError` before it is
    installed, unless ``allow_mismatch`` (then it is installed and listed in ``mismatched``).
    ``progress``: True for progress bars on stderr, or a callable ``(label, done, total)``.
    Rerunning resumes partial transfers and skips complete files; a folder that already holds
    every file but those with a fallback (:data:`NOT_PUBLISHED`) needs no network. Returns a
    :class:`DownloadReport`, whose ``missing`` lists expected files still absent.
    """
    run = _Download.start(data_dir, base_url, timeout, reference, blobs, progress,
                          allow_mismatch)
    _fetch_benchmark(run, keep_archive)
    if xprobe:
        _fetch_xprobe(run)
    _list_absent(run, xprobe)
    for line in run.report.lines():
        log.info("%s", line)
    return run.report


@dataclass
class _Download:
    """What every step of one :func:`download_es` run shares: the data folder, the source
    (``base`` URL, ``timeout``), what files must match (``reference``, ``blobs``,
    ``allow_mismatch``), the progress callback and the report the steps fill in."""

    data: Path
    base: str
    timeout: float
    reference: Mapping[str, str]
    blobs: Mapping[str, str]
    allow_mismatch: bool
    progress: Any
    report: DownloadReport

    @classmethod
    def start(cls, data_dir: os.PathLike | str, base_url: str, timeout: float,
              reference: Optional[Mapping[str, str]], blobs: Optional[Mapping[str, str]],
              progress: Any, allow_mismatch: bool) -> "_Download":
        """Check the options (an :class:`OptionError` names the first bad one, before any
        network or file access) and resolve their defaults."""
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise OptionError(f"--timeout must be a positive number of seconds, got {timeout!r}")
        if not base_url.startswith(("http://", "https://")):
            raise OptionError(f"--base-url must start with http:// or https://, got "
                              f"{base_url!r}")
        if blobs is None:
            blobs = REFERENCE_GIT_BLOBS if reference is None else {}
        reference = REFERENCE_SHA256 if reference is None else reference
        data = Path(data_dir).expanduser()
        if data.exists() and not data.is_dir():
            raise OptionError(f"--data-dir {data}: exists and is not a directory")
        return cls(data=data, base=base_url.rstrip("/"), timeout=timeout, reference=reference,
                   blobs=blobs, allow_mismatch=allow_mismatch,
                   progress=_TqdmProgress() if progress is True else progress,
                   report=DownloadReport(data))

    @property
    def staging(self) -> Path:
        """Where transfers land before they are verified and moved into place."""
        return self.data / STAGING_DIR

    def verified(self, path: Path, rel: str) -> bool:
        return verified(path, rel, self.reference, self.blobs)

    def bar(self, label: str) -> Optional[Callable[[int, Optional[int]], None]]:
        """The progress callback of one transfer (None without progress)."""
        progress = self.progress
        if not progress:
            return None
        return lambda done, total: progress(label, done, total)


def _fetch_benchmark(run: _Download, keep_archive: bool) -> None:
    """Step 1: the benchmark repository archive, fetched (or resumed) and unpacked, unless
    every file it provides is already here and verified (then no network is needed). A
    corrupt or refused archive is deleted, so the next run fetches it again."""
    data, report = run.data, run.report
    archive_files = [p for p in run.reference if not p.startswith(XPROBE_DIR + "/")]
    if archive_files and all(run.verified(data / p, p) for p in archive_files):
        report.up_to_date.extend(sorted(archive_files))
        return
    url = f"{run.base}/{BENCHMARK_REPO}/archive/{BENCHMARK_COMMIT}.zip"
    archive = run.staging / "Spanish-Sentence-Evaluation.zip"
    if not archive.is_file():
        try:
            fetch(url, archive, run.timeout, run.bar("benchmark archive"))
        except _NotFound:
            raise DownloadError(f"{url}: not found (HTTP 404); check --base-url") from None
        report.fetched.append(url)
    try:
        unpack_archive(archive, data, run.reference, report, run.blobs, run.allow_mismatch)
    except EstratosError:
        archive.unlink()  # a corrupt archive is useless: the next run fetches it again
        raise
    if not keep_archive:
        archive.unlink()


def _fetch_xprobe(run: _Download) -> None:
    """Step 2: the Spanish X-Probe files, one by one (:func:`_fetch_xprobe_file`), then the
    staging folders they leave empty are removed."""
    for task in XPROBE_TASKS:
        for split in XPROBE_SPLITS:
            _fetch_xprobe_file(run, task, split)
    xstage = run.staging / "xprobe"
    for folder in sorted(xstage.glob("*"), reverse=True) if xstage.is_dir() else ():
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    if xstage.is_dir() and not any(xstage.iterdir()):
        xstage.rmdir()


def _fetch_xprobe_file(run: _Download, task: str, split: str) -> None:
    """One X-Probe file: skipped when verified in place; else fetched into the staging
    folder, verified there and moved into place. A file absent at the source is left for
    :func:`_list_absent` to report; a file with a fallback (:data:`NOT_PUBLISHED`) that
    cannot be reached marks the source unreachable (the files after it with a fallback are
    not tried), while any other file's network error is raised."""
    report = run.report
    rel = f"{XPROBE_DIR}/{task}/{split}.txt"
    target = run.data / rel
    if run.verified(target, rel):
        report.up_to_date.append(rel)
        return
    optional = rel in NOT_PUBLISHED
    if optional and report.unreachable:
        return  # the source is unreachable: the fallback applies
    url = f"{run.base}/{XPROBE_REPO}/raw/{XPROBE_COMMIT}/es/{task}/{split}.txt"
    staged = run.staging / "xprobe" / task / f"{split}.txt"
    try:
        fetch(url, staged, run.timeout, run.bar(rel))
    except _NotFound:
        return  # absent at the source: reported by _list_absent
    except DownloadError:
        if not optional:
            raise
        report.unreachable = f"not fetched: {run.base} could not be reached"
        return
    report.fetched.append(url)
    if not run.verified(staged, rel):
        if not run.allow_mismatch:
            staged.unlink()
            raise _mismatch_error([rel])
        report.mismatched.append(rel)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, target)
    report.installed.append(rel)


def _list_absent(run: _Download, xprobe: bool) -> None:
    """Step 3: every expected file (the reference's, the registry's, those with a fallback;
    X-Probe's only when it was asked for) still absent goes to the report, as unpublished
    (it has a fallback) or missing; an empty staging folder is removed."""
    data, report = run.data, run.report
    expected = set(run.reference) | registry_files(data) | set(NOT_PUBLISHED)
    if not xprobe:
        expected = {p for p in expected if not p.startswith(XPROBE_DIR + "/")}
    for rel in sorted(expected):
        if not (data / rel).exists():
            (report.unpublished if rel in NOT_PUBLISHED else report.missing).append(rel)
    if run.staging.is_dir() and not any(run.staging.iterdir()):
        run.staging.rmdir()


#: ``estratos tasks download BENCHMARK``: each downloadable benchmark's function, declared
#: with :data:`estratos.vocab.DOWNLOADABLE` (the names the CLI lists before importing this)
DOWNLOADERS: Registry[Callable[..., DownloadReport]] = Registry(
    "benchmark", {"es": download_es}, names=DOWNLOADABLE)
