"""tasks download es: against a local HTTP server (Range support) serving archives built here."""

from __future__ import annotations

import hashlib
import io
import os
import random
import socket
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, Iterator, List, Optional, Tuple

import pytest
from click.testing import CliRunner

from estratos.cli import cli
from estratos.errors import InputError, OptionError
from estratos.tasks.download import (BENCHMARK_COMMIT, BENCHMARK_REPO, NOT_PUBLISHED,
                                     REFERENCE_GIT_BLOBS, REFERENCE_SHA256, XPROBE_COMMIT,
                                     XPROBE_REPO, XPROBE_TASKS, DownloadError, download_es, fetch,
                                     git_blob_id, registry_files)

ARCHIVE_PATH = f"/{BENCHMARK_REPO}/archive/{BENCHMARK_COMMIT}.zip"
XPROBE_RAW = f"/{XPROBE_REPO}/raw/{XPROBE_COMMIT}/es"
TOP = f"Spanish-Sentence-Evaluation-{BENCHMARK_COMMIT}"


class _Server(ThreadingHTTPServer):
    files: Dict[str, bytes]
    cut: Dict[str, int]          # path -> bytes to send before dropping the connection (once)
    status: Dict[str, int]       # path -> forced HTTP status
    requests: List[Tuple[str, Optional[str]]]


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        self.server.requests.append((self.path, self.headers.get("Range")))
        if self.path in self.server.status:
            self.send_error(self.server.status[self.path])
            return
        body = self.server.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        start = 0
        rng = self.headers.get("Range")
        if rng:
            start = int(rng.split("=")[1].rstrip("-"))
            if start >= len(body):
                self.send_error(416)
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        payload = body[start:]
        cut = self.server.cut.pop(self.path, None)
        if cut is not None:
            self.wfile.write(payload[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(payload)


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.files, srv.cut, srv.status, srv.requests = {}, {}, {}, []
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def base(srv: _Server) -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


BIG = bytes(random.Random(0).getrandbits(8) for _ in range(200_000))
DATA: Dict[str, bytes] = {
    "senteval/TASS/task1/train.txt": "hola mundo\t1\nadiós\t0\n".encode("utf-8"),
    "senteval/SQC/test.txt": b"ABBR:exp \xc2\xbfQu\xc3\xa9 es?\n",
    "discoeval/SP/wiki/valid.txt": b"0\ta\tb\tc\td\te\n",
    "discoeval/RST/RST_TRAIN.pkl": BIG,
}
XPROBE = {"bigram_shift/va.txt": "O\tla casa\n".encode(), "bigram_shift/te.txt": b"I\tcasa la\n"}


def make_archive(extra: Optional[Dict[str, bytes]] = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{TOP}/README.md", "readme")
        zf.writestr(f"{TOP}/senteval/engine.py", "code")
        zf.writestr(f"{TOP}/data/senteval/SQC/test.txt.depecrated", "old")
        for rel, data in {**DATA, **(extra or {})}.items():
            zf.writestr(f"{TOP}/data/{rel}", data)
    return buf.getvalue()


def serve_all(srv: _Server, archive: Optional[bytes] = None) -> Dict[str, str]:
    srv.files[ARCHIVE_PATH] = make_archive() if archive is None else archive
    for rel, data in XPROBE.items():
        srv.files[f"{XPROBE_RAW}/{rel}"] = data
    reference = {rel: sha(data) for rel, data in DATA.items()}
    reference.update({f"senteval/Probing-xprobe/{rel}": sha(d) for rel, d in XPROBE.items()})
    reference["senteval/MC/muchocine.pos"] = sha(b"never served")
    return reference


def test_download_installs_the_layout(server, tmp_path):
    reference = serve_all(server)
    out = tmp_path / "es"
    report = download_es(out, base_url=base(server), timeout=5, reference=reference)
    for rel, data in DATA.items():
        assert (out / rel).read_bytes() == data
    for rel, data in XPROBE.items():
        assert (out / "senteval/Probing-xprobe" / rel).read_bytes() == data
    assert not (out / "senteval/SQC/test.txt.depecrated").exists()
    assert not (out / "README.md").exists() and not (out / "senteval/engine.py").exists()
    assert not (out / ".estratos-download").exists()  # archive removed, staging cleaned
    assert "senteval/MC/muchocine.pos" in report.missing and not report.complete
    assert "senteval/Probing-xprobe/bigram_shift/tr.txt" in report.unpublished
    assert "senteval/TASS/task1/train.txt" not in report.missing
    assert report.mismatched == []
    assert any(url.endswith(ARCHIVE_PATH) for url in report.fetched)
    assert any("missing: senteval/MC/muchocine.pos" in line for line in report.lines())
    # no temporary files anywhere
    assert not [p for p in out.rglob("*") if p.name.endswith((".tmp", ".part"))]


def test_rerun_skips_complete_files(server, tmp_path):
    reference = serve_all(server)
    del reference["senteval/MC/muchocine.pos"]  # a missing file would make it try again
    out = tmp_path / "es"
    download_es(out, base_url=base(server), timeout=5, reference=reference)
    server.requests.clear()
    report = download_es(out, base_url=base(server), timeout=5, reference=reference)
    paths = [p for p, _ in server.requests]
    assert ARCHIVE_PATH not in paths
    assert not any("bigram_shift/va.txt" in p for p in paths)
    assert "senteval/TASS/task1/train.txt" in report.up_to_date
    assert report.installed == []


def test_interrupted_download_resumes_with_range(server, tmp_path):
    reference = serve_all(server)
    server.cut[ARCHIVE_PATH] = 50_000
    out = tmp_path / "es"
    with pytest.raises(DownloadError, match="resume"):
        download_es(out, base_url=base(server), timeout=5, reference=reference)
    part = out / ".estratos-download" / "Spanish-Sentence-Evaluation.zip.part"
    assert part.stat().st_size == 50_000
    assert not (out / "senteval").exists()  # nothing unpacked from half an archive
    server.requests.clear()
    report = download_es(out, base_url=base(server), timeout=5, reference=reference)
    assert (ARCHIVE_PATH, "bytes=50000-") in server.requests
    assert (out / "discoeval/RST/RST_TRAIN.pkl").read_bytes() == BIG
    assert report.mismatched == []


def test_fetch_restarts_when_server_ignores_range(server, tmp_path):
    class NoRange(_Handler):
        def do_GET(self) -> None:
            del self.headers["Range"]
            super().do_GET()

    srv = _Server(("127.0.0.1", 0), NoRange)
    srv.files, srv.cut, srv.status, srv.requests = {"/f": b"0123456789"}, {}, {}, []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        dest = tmp_path / "f"
        dest.with_name("f.part").write_bytes(b"XXXX")
        fetch(f"http://127.0.0.1:{srv.server_address[1]}/f", dest, timeout=5)
        assert dest.read_bytes() == b"0123456789"
    finally:
        srv.shutdown()
        srv.server_close()


def test_offline_fails_fast_and_writes_nothing(tmp_path, monkeypatch):
    """Fast means one refused connection and no retry (counted, not timed: a loaded machine
    cannot make it flaky)."""
    from estratos.tasks import download

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there: connection refused
    out = tmp_path / "es"
    opened = []

    def counting_urlopen(*args, **kwargs):
        opened.append(args[0].full_url)
        return urlopen(*args, **kwargs)

    urlopen = download.urlopen
    monkeypatch.setattr(download, "urlopen", counting_urlopen)
    with pytest.raises(DownloadError, match="cannot reach .*internet"):
        download_es(out, base_url=f"http://127.0.0.1:{port}", timeout=2)
    assert len(opened) == 1, opened
    assert not out.exists()


def test_corrupt_archive_is_rejected_and_removed(server, tmp_path):
    good = make_archive()
    reference = serve_all(server, archive=good[:-5000] + b"\0" * 5000)
    out = tmp_path / "es"
    with pytest.raises(DownloadError, match="zip"):
        download_es(out, base_url=base(server), timeout=5, reference=reference)
    assert not (out / "senteval").exists()
    assert not (out / ".estratos-download" / "Spanish-Sentence-Evaluation.zip").exists()


def test_crc_error_is_rejected(server, tmp_path):
    good = bytearray(make_archive())
    i = good.find(BIG[:64])
    good[i + 1000] ^= 0xFF  # flip one byte inside a stored member
    reference = serve_all(server, archive=bytes(good))
    with pytest.raises(DownloadError, match="corrupt member"):
        download_es(tmp_path / "es", base_url=base(server), timeout=5, reference=reference)
    assert not (tmp_path / "es" / "senteval").exists()


def test_unsafe_member_is_rejected(server, tmp_path):
    reference = serve_all(server, archive=make_archive({"senteval/../../../../evil.txt": b"x"}))
    with pytest.raises(InputError, match="unsafe member"):
        download_es(tmp_path / "es", base_url=base(server), timeout=5, reference=reference)
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path / "es" / "senteval").exists()


def test_http_errors(server, tmp_path):
    reference = serve_all(server)
    server.status[ARCHIVE_PATH] = 500
    with pytest.raises(DownloadError, match="HTTP 500"):
        download_es(tmp_path / "a", base_url=base(server), timeout=5, reference=reference)
    server.status[ARCHIVE_PATH] = 404
    with pytest.raises(DownloadError, match="not found.*--base-url"):
        download_es(tmp_path / "b", base_url=base(server), timeout=5, reference=reference)


def test_checksum_mismatch_is_an_error_unless_allowed(server, tmp_path):
    reference = serve_all(server)
    reference["senteval/SQC/test.txt"] = sha(b"another version")
    with pytest.raises(DownloadError, match=r"1 downloaded file\(s\) differ from the pinned "
                       r"commits' copies .*senteval/SQC/test.txt; nothing of them was "
                       r"installed.*--allow-mismatch"):
        download_es(tmp_path / "es", base_url=base(server), timeout=5, reference=reference)
    assert not (tmp_path / "es" / "senteval").exists()  # the archive is verified first
    report = download_es(tmp_path / "es", base_url=base(server), timeout=5,
                         reference=reference, allow_mismatch=True)
    assert report.mismatched == ["senteval/SQC/test.txt"]
    assert any("differs from the pinned commit's copy (kept: --allow-mismatch)" in line
               for line in report.lines())


def test_a_file_the_pinned_commit_lacks_is_a_mismatch(server, tmp_path):
    reference = serve_all(server, archive=make_archive({"senteval/NEW/extra.txt": b"new"}))
    with pytest.raises(DownloadError, match="senteval/NEW/extra.txt"):
        download_es(tmp_path / "es", base_url=base(server), timeout=5, reference=reference)


def test_xprobe_mismatch_is_refused_before_it_is_installed(server, tmp_path):
    reference = serve_all(server)
    reference["senteval/Probing-xprobe/bigram_shift/te.txt"] = sha(b"other")
    with pytest.raises(DownloadError, match="bigram_shift/te.txt"):
        download_es(tmp_path / "es", base_url=base(server), timeout=5, reference=reference)
    assert not (tmp_path / "es/senteval/Probing-xprobe/bigram_shift/te.txt").exists()


def test_files_without_a_sha256_are_verified_by_git_blob_id(server, tmp_path):
    reference = serve_all(server)
    data = DATA["discoeval/RST/RST_TRAIN.pkl"]
    del reference["discoeval/RST/RST_TRAIN.pkl"]
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    report = download_es(tmp_path / "es", base_url=base(server), timeout=5,
                         reference=reference, blobs={"discoeval/RST/RST_TRAIN.pkl": blob})
    assert report.mismatched == [] and "discoeval/RST/RST_TRAIN.pkl" in report.installed
    assert git_blob_id(tmp_path / "es/discoeval/RST/RST_TRAIN.pkl") == blob
    with pytest.raises(DownloadError, match="RST_TRAIN.pkl"):
        download_es(tmp_path / "es2", base_url=base(server), timeout=5, reference=reference,
                    blobs={"discoeval/RST/RST_TRAIN.pkl": "0" * 40})


def test_every_pinned_file_has_a_digest():
    # every file a task may read is verified: by sha256, or by its git blob id
    assert set(NOT_PUBLISHED) <= set(REFERENCE_GIT_BLOBS)
    assert not set(REFERENCE_SHA256) & set(REFERENCE_GIT_BLOBS)
    assert all(len(d) == 40 for d in REFERENCE_GIT_BLOBS.values())


def test_cli_download_of_a_complete_copied_folder_needs_no_network(tmp_path, monkeypatch):
    import estratos.tasks.download as dl

    out = tmp_path / "es"
    reference = {}
    xprobe = {f"senteval/Probing-xprobe/{t}/{split}.txt": f"{t} {split}\t0\n".encode()
              for t in XPROBE_TASKS for split in ("va", "te")}
    for rel, data in {**DATA, **xprobe}.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
        reference[rel] = sha(data)
    monkeypatch.setattr(dl, "REFERENCE_SHA256", reference)
    monkeypatch.setattr(dl, "registry_files", lambda data_dir: set())
    res = CliRunner().invoke(cli, ["tasks", "download", "es", "--data-dir", str(out),
                                   "--base-url", "http://127.0.0.1:9", "--timeout", "2",
                                   "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "absent, with a fallback" in res.output and "not fetched" in res.output
    assert "bigram_shift/tr.txt" in res.output


def test_cli_download_mismatch_exits_1_and_allow_mismatch_installs(server, tmp_path,
                                                                    monkeypatch):
    import estratos.tasks.download as dl

    reference = serve_all(server)
    del reference["senteval/MC/muchocine.pos"]
    reference["senteval/SQC/test.txt"] = sha(b"another version")
    monkeypatch.setattr(dl, "REFERENCE_SHA256", reference)
    monkeypatch.setattr(dl, "registry_files", lambda data_dir: set())
    args = ["tasks", "download", "es", "--data-dir", str(tmp_path / "es"), "--base-url",
            base(server), "--timeout", "5", "--no-progress"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1, res.output
    assert res.output.count("Error:") == 1 and "--allow-mismatch" in res.output
    res = CliRunner().invoke(cli, args + ["--allow-mismatch"])
    assert res.exit_code == 0, res.output
    assert "warning: senteval/SQC/test.txt differs from the pinned commit's copy" in res.output
    assert f"{BENCHMARK_REPO}@{BENCHMARK_COMMIT[:12]}" in res.output


@pytest.mark.parametrize("kwargs, needle", [
    ({"timeout": 0}, "timeout"),
    ({"base_url": "ftp://example.org"}, "base_url"),
])
def test_bad_options(tmp_path, kwargs, needle):
    with pytest.raises(OptionError, match=needle):
        download_es(tmp_path / "es", **kwargs)
    assert not (tmp_path / "es").exists()


def test_data_dir_is_a_file(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(OptionError, match="data_dir"):
        download_es(f, base_url="http://127.0.0.1:9")


def test_cli_download(server, tmp_path, monkeypatch):
    import estratos.tasks.download as dl

    reference = serve_all(server)
    monkeypatch.setattr(dl, "REFERENCE_SHA256", reference)
    out = tmp_path / "es"
    runner = CliRunner()
    res = runner.invoke(cli, ["tasks", "download", "es", "--data-dir", str(out),
                              "--base-url", base(server), "--timeout", "5", "--no-progress"])
    # the reference lists a file the server lacks: reported, and the exit code says so
    assert res.exit_code == 1, res.output
    assert "missing: senteval/MC/muchocine.pos" in res.output
    assert (out / "senteval/TASS/task1/train.txt").is_file()
    res = runner.invoke(cli, ["tasks", "download", "es", "--data-dir", str(out),
                              "--base-url", "http://127.0.0.1:9", "--timeout", "0"])
    assert res.exit_code == 2 and "--timeout" in res.output


def test_registry_and_download_agree_on_the_files(tmp_path):
    # every file a Spanish task reads is either in the published set or known unpublished,
    # and every published file is read by some task
    expected = registry_files(tmp_path)
    assert expected == set(REFERENCE_SHA256) | set(NOT_PUBLISHED)


@pytest.mark.parametrize("mask", [0o002, 0o077])
def test_cli_download_files_respect_the_umask(server, tmp_path, monkeypatch, mask):
    import stat

    import estratos.tasks.download as dl

    monkeypatch.setattr(dl, "REFERENCE_SHA256", serve_all(server))
    out = tmp_path / "es"
    old = os.umask(mask)
    try:
        res = CliRunner().invoke(cli, ["tasks", "download", "es", "--data-dir", str(out),
                                       "--base-url", base(server), "--timeout", "5",
                                       "--no-progress"])
    finally:
        os.umask(old)
    assert res.exit_code == 1, res.output  # muchocine.pos is never served
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) == len(DATA) + len(XPROBE)
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {oct(0o666 & ~mask)}
