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
copy, the git blob id for the rest), so a changed upstream cannot change results unnoticed: a
file that differs is an error unless the caller accepts it (``allow_mismatch``,
``--allow-mismatch``).

Why it is built this way: downloads are large and links flaky, so every transfer goes to a
``.part`` file that a rerun continues with an HTTP ``Range`` request; files already complete
(matching the reference checksum) are skipped; the archive is checked (zip CRCs) before a
single file is unpacked, and each unpacked file appears by atomic rename, so the data folder
never holds half a file. Without network it fails within the connect timeout, with a message
that says so. Nothing beyond the standard library is used (urllib).
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import logging
import os
import posixpath
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Set, Tuple
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

from estratos import __version__
from estratos.errors import DiskFull, DownloadError, EstratosError, InputError, OptionError
from estratos.files import create_beside, fsync_file, preallocate, publish, write_all

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

# sha256 of each file of the reference copy the project is tested against (the pinned
# commits' files); a downloaded file that differs is refused unless allow_mismatch.
_REFERENCE_SHA256 = """
69fbd413a8ebd4da66cc49f301abc829b84b694b2c34820466ab83ef5fb760df discoeval/BSO/mlsum/test.txt
daeb5097e5d30f5d036a727e4b21d000eee4765501638d5218fe10df3b742e28 discoeval/BSO/mlsum/train.txt
ae174923f42541b577ae82e155ffdc2667a29aa24bce40c4e775fcd077f4c0cc discoeval/BSO/mlsum/valid.txt
73f8a9c3697fe3cd711e8b296ef5199533990a774539a4cae844234e3f3b2bfe discoeval/BSO/thesis/test.txt
5822320a5ab75652b51d63fe2cfbb4e9ae62e45ada72aa3723a39e2fe4ffb6bd discoeval/BSO/thesis/train.txt
f8744edb47de7d3af4df9748e73d8525cbff25ee56dc4194b8f433b2085ee209 discoeval/BSO/thesis/valid.txt
2694db29d47f4f4981109515401efd30a9647d024f25f3c5e375c12847d77174 discoeval/BSO/wiki/test.txt
eb1340c377f860ab72fe0160d5cc34846a7094e4d566c7323ce03f4e87c4adad discoeval/BSO/wiki/train.txt
604d6c66f0102ebb161bb56e2704dc72d0fc2c18f8da671ccf7c865a90fffa6f discoeval/BSO/wiki/valid.txt
0da3cf2cb872de618d9e54ab30422c3905ef261fcc0d685f85caa2e14147890f discoeval/DC/gdd/test.txt
8abad4e5a4c845fa349ee0b470cc355d3839af9a098e3919e0d5bcf65d415ef3 discoeval/DC/gdd/train.txt
873f1e5878cfc2e91344c93106d693547b4bb5927f8dc57f6a1d1463e529385d discoeval/DC/gdd/valid.txt
2a76103875ddff87a03cb3467b536fa1bac6722a6ad40178c3084840a95763a4 discoeval/DC/opus/test.txt
9187f70e063ab88a96d9a73955a202bbaf41868a224a0c4fe1f720edc5fecf91 discoeval/DC/opus/train.txt
27fc67ef0ba7039c26689fb1f4d83e918442aaa2a0e07c774e28c136964afc8d discoeval/DC/opus/valid.txt
29517fcc06368561158d233507f8f3378d20f446dfbdc9531471f3d9555dac90 discoeval/DC/wiki/test.txt
33f9f9c9e530b7817480b090903b287bac06e67b34259bbb8a4a2bfb75e9e2b8 discoeval/DC/wiki/valid.txt
da2697ae685a58d448247c1629471b2267759e2d686470a5cc774779a594180c discoeval/RST/RST_DEV.pkl
5dd6515bc5953d294552fcca4a207d822cf5cf37a4b642f92ccad8c0eb584ff0 discoeval/RST/RST_TEST.pkl
eacdecaa292a3c814f829cf9d99f963647406d2680df43958f3c65990582d71a discoeval/RST/RST_TRAIN.pkl
7bde23ecdd96db07101d14f521a4af4cab27824c2c2649f54cb6552003db51af discoeval/SP/mlsum/test.txt
93d45ba463d787328a78d0d280105030b18e829a158cd5ca889f46c305e9955e discoeval/SP/mlsum/valid.txt
bc6b57cee973291e7048e2292534c2665e722baacb741dfb0fa6ec28faea8ba2 discoeval/SP/thesis/test.txt
204e6194f4a5078b5d2c422bcf4641a6fffbc4b8180189d0bb5f580380c8d69c discoeval/SP/thesis/valid.txt
484bcc56a13625df286d44e2a7ea21e6f352aaeeb9312f2f2d108a226dc965ce discoeval/SP/wiki/test.txt
9485394703d8929c505b026e1eda0dedeeebd690ab8d3590ca32182992cb8c66 discoeval/SP/wiki/valid.txt
984377ae7c3dc90528b6677425daa8e7ad6051db46c7d1d389487301e1081748 discoeval/SSP/mlsum/test.txt
c08649baa80d35c2554f80ee693f789bf788754c967e8049f2e5cbf23e469bff discoeval/SSP/mlsum/train.txt
269825a64034d2a16e5f0ca3c0a42a77c423bafea7b8ab4cabfe18a4e7d99200 discoeval/SSP/mlsum/valid.txt
5bc4c48cb86648efeb7f2a1592a58f00c2be1f30e4aa0848c055c71b9c18aa81 senteval/FAC/fac.objective
3e4748d5624f161f1a50a6b12c59134fbb72447e0ac66f5824eb7aa58261eb54 senteval/FAC/fac.subjective
7380c0d31b9cd50d1b520845db3c7bb7728d4151b0770a4baf0e5d4dcdecf12b senteval/MC/muchocine.neg
a020a41f637bc08ef7630ac2a8d438fb0390e89c2704f671f20ea1850463579b senteval/MC/muchocine.pos
4e4e02b2a8f89f4a499fed48cc516acb5a38f8993ea089566a6628ed478ad444 senteval/NLI/labels.dev
5bf068f31aee4ba21422e7348b197cc57e4c9c4f096bfab3a8bdfe4ea3957069 senteval/NLI/labels.test
d8f53d411008402dad04f0e20b2b09ee89f7d1d041793dc33e09e5605b841f39 senteval/NLI/labels.train
da053399ce865d1a21d4f76a7e48383713c042b8a715fa22fc8539a0f9e1b655 senteval/NLI/s1.dev
0dae9c398564bd53459e4501f5c897c58dff4e0148d118d7f3dea074f31020f1 senteval/NLI/s1.test
30a1e14468adf08ff381bda56acddf6aaad6eab60bad5147b450c1bdb1a15915 senteval/NLI/s1.train
6b33d35f2172357453a97a2b9635dd1eb61fc0907cd81a8bb6e0d59b2135d178 senteval/NLI/s2.dev
17c4e38caf1c61bb90afbc35fb6e031367967cad99ceb51b354833bc45f0d8c8 senteval/NLI/s2.test
ed363f6a16639230b047a9ea85662325f84d257b183c07e4b8564d04756f90cd senteval/NLI/s2.train
db2c8de69134d424b8f9362a2b21881342c2eac2263234db50ca42524d37c093 senteval/PAWS/paraphrase_test.txt
9de5fcef305cef6ebd631997313741318e58428aca4e860bca8b3466a2b0d5f4 senteval/Probing-xprobe/bigram_shift/te.txt
45e8157b092da6eb5049e1d5ba08d4b8b77d373d2afa0c7e38c38fc4d37d468e senteval/Probing-xprobe/bigram_shift/va.txt
e3ac2de59fec3e6c30e24d17f5d45ebd07819e05bf6c601ada7549ffe2bba825 senteval/Probing-xprobe/coordination_inversion/te.txt
b4aec02d067b8d9b10706b17aa80115cb28b1d74caa1b9af1ad30302865ff439 senteval/Probing-xprobe/coordination_inversion/va.txt
6829f36e3ee707259a75d4d7dd0ea6fea1ae8b38aed837114b7079a84058cc04 senteval/Probing-xprobe/obj_number/te.txt
c3e32b3bbab7f8742f7dd0c7b2d32fe80e0a2c31aba328559cfbc133498fe60d senteval/Probing-xprobe/obj_number/va.txt
5908e4386c1f4cd7a0fcb4abddb8c04ebb1f21860f79570d477edcd62ab18002 senteval/Probing-xprobe/odd_man_out/te.txt
87dc5b08d57ae324f5cafd9be8d13178c1af98dae278a7f708551f81f7c4beef senteval/Probing-xprobe/odd_man_out/va.txt
042150486379d546d3e780c3f774afae62c5ba2b6273706f0a32694ada41128a senteval/Probing-xprobe/past_present/te.txt
4b45ee38717933cf66189e73c50fbc988963778119fc35ba05f93f3731470fcc senteval/Probing-xprobe/past_present/va.txt
15b424a526e0223b98adb6ee41de082cfad0ec9dbd23f3fb3b5f21fa68481cb9 senteval/Probing-xprobe/sentence_length/te.txt
e477a11f737b3fea7a68c97c43db93c00e754a2628c309f50727b7540e2ab1dc senteval/Probing-xprobe/sentence_length/va.txt
1444e3517392807762b4cec2f89a381779a97857a9b6558fa47888d816d9f508 senteval/Probing-xprobe/subj_number/te.txt
ee0c896fbff6c149d5b6999d7bb7d9a2b0e270bb0cfb51b3671a1078f46e69b5 senteval/Probing-xprobe/subj_number/va.txt
c72f77cfbf5cc2e548c10f5a395e876d1b4544f6c00dff8562014d638df24a0d senteval/Probing-xprobe/tree_depth/te.txt
c72f77cfbf5cc2e548c10f5a395e876d1b4544f6c00dff8562014d638df24a0d senteval/Probing-xprobe/tree_depth/va.txt
e1f514a10ada06378dc3304b3dab65aeef2a4aef34f903215fed8b39dd5c6ada senteval/Probing-xprobe/word_content/te.txt
35727a0fc3c6d75a45612f89a63a981d5e4ca6c8e3823a62986c57d2b7507257 senteval/Probing-xprobe/word_content/va.txt
b13d2dedd8cf4ad5e698e3ca3ab5462c4a634b44cb19c08bd8358a7b3f834548 senteval/SICK/SICK_test.txt
527991887b3b900930855a9161c3110db6427c9275674a1b88515fbd1c4f861d senteval/SICK/SICK_train.txt
f600aa74316f0c0111d4efe97ff67da069ad80f9a1f66775faec0ac604f1e452 senteval/SICK/SICK_trial.txt
ec88810cf243cbd204272e2d5fdccb254201db5dc508d167171a36254700d93b senteval/SQC/test.txt
f556d266ca5d973451424252d9d8049b78cb4dc5934aadaefd03fe64428cf683 senteval/SQC/train.txt
c2b323651c276cd70f53aebd129ce2369dafd9f0eca77ca9b765cad35335643c senteval/STS/STS14-es-test/STS.gs.news.txt
cbc47c1dcf876b757c5f16974f771cd7aaa8097b66f23278febfa2fa03755806 senteval/STS/STS14-es-test/STS.gs.wikipedia.txt
bbb1ac32737afc6f356c9de1b1b816291eeafa4ea58cf53b57161ba3a35ad266 senteval/STS/STS14-es-test/STS.input.news.txt
560908f85093484c1ee259b789c3665821de243103c2c84f794250108180e839 senteval/STS/STS14-es-test/STS.input.wikipedia.txt
a47f321e0b3ede893a5fc9dc60d1096abd7ad54e245cc118bc2bb92b0e1bfc5b senteval/STS/STS15-es-test/STS.gs.newswire.txt
35c2d6eed43fe1147b2c8af285b6ef22c12f3f9373bd76a7f8e9b834aef124d1 senteval/STS/STS15-es-test/STS.gs.wikipedia.txt
8c74321f4a50ad0b03e85270b06f5a9e41669d8baa16622a26b453112b2bc54a senteval/STS/STS15-es-test/STS.input.newswire.txt
6d04c5c1a853dfbffb4d520cbba1071a4ef91e8dc9fc81a55a376e67127ca9b5 senteval/STS/STS15-es-test/STS.input.wikipedia.txt
96f9d7914e31510774b4b696024b4da8f66ac1ed681d2e9895cc622185a5e637 senteval/STS/STS17-es-test/STS.gs.track3.es-es.txt
397278880f074682fd490f49117777b3981e62dea70390f3837f60f9012c30c1 senteval/STS/STS17-es-test/STS.input.track3.es-es.txt
cc42deff5083a57a5245fd7d06d300cd9d5b77064327b27468f745430d47720a senteval/TASS/task1/dev.txt
985f1e742f74776d23bdb23579bfc4d4b7f0b8dcfcaffbc057b3833e2293aeac senteval/TASS/task1/test.txt
2acb6ee104f38c1ec0ed887b667c9e7501ad35057b834833b0e76af4927ddc1f senteval/TASS/task1/train.txt
47553ac7ceb586423b5e5c4f134ef099c86608c24d26ea75dfe80eeccf0696d6 senteval/TASS/task2/dev.txt
937bce11e8255d66d503ea00e990bd0a3458a0e45b78f41efec302b1f0e3b4ae senteval/TASS/task2/test.txt
52119b677b4c5ac0a7e1cd780e5a668be0aae238f7a2ad28a200495e402ed8de senteval/TASS/task2/train.txt
"""
REFERENCE_SHA256: Mapping[str, str] = {
    path: digest for digest, path in (line.split() for line in _REFERENCE_SHA256.split("\n")
                                      if line.strip())}

# git blob ids (``git hash-object``) of the pinned commits' other data files: the large files
# the reference copy lacks, verified all the same when a download brings them.
_REFERENCE_GIT_BLOBS = """
e0ee95196a9e1e393611f0ba9a43722aa4e88360 discoeval/DC/wiki/train.txt
7f22b0b6f5f298cda5745486e11f1964d88dd997 discoeval/SP/mlsum/train.txt
b694d44135134cdd94725f8fb027dc7b190be0a5 discoeval/SP/thesis/train.txt
4c75371f9529ade608f80947eb613588df679f3a discoeval/SP/wiki/train.txt
c4cc6e5a5f0690758dfbe9946d4e5b710b8224ee senteval/PAWS/paraphrase_train.txt
807f5affce4d9019979ec94d509e2a7163070a2c senteval/Probing/bigram_shift.txt
ddbf94677c10490ec5016ad44108929e825898fa senteval/Probing/coordination_inversion.txt
bba96c5e4f847081fbf3a659297b10c464e5aba9 senteval/Probing/obj_number.txt
6935d6960a9d704bcb184c538c658f5507d7119c senteval/Probing/odd_man_out.txt
e5625887ffb35860275dec2ad20877dbaf10abc2 senteval/Probing/past_present.txt
8832cf2319e65b2110b8ccdb742888ae8a92e517 senteval/Probing/sentence_length.txt
f700f966213cad06a9b329b35f6c9e1251f8fbd0 senteval/Probing/subj_number.txt
d9306ec78a45c191604f29227c3d96220305e0ee senteval/Probing/tree_depth.txt
a76ec6fb854f40a05e48fdd2316bbfd22a56b52b senteval/Probing/word_content.txt
ce8679ec6f293dd83ebd69d5779b819afd36cd78 senteval/Probing-xprobe/bigram_shift/tr.txt
afb78f444cbbfd581a39c85ef50a3ec935fd46f3 senteval/Probing-xprobe/coordination_inversion/tr.txt
ed3d4c2ceee096311ff74f2053820ef73c7e11d0 senteval/Probing-xprobe/obj_number/tr.txt
002f30c0c656ca09c863edf2594fc9ac904d840f senteval/Probing-xprobe/odd_man_out/tr.txt
0e3f90396f338120d0bf55d35ef21255704e7102 senteval/Probing-xprobe/past_present/tr.txt
8a6239619457b965f683ceac8dc3d666b66b4b7e senteval/Probing-xprobe/sentence_length/tr.txt
97cf3dcf63bfb7c1202fd32a248e7b9c2b8a955e senteval/Probing-xprobe/subj_number/tr.txt
bfa1905375380bf7347483b2989352fab7d2c408 senteval/Probing-xprobe/tree_depth/tr.txt
3e07ab5e6130ec9c75e34bc72e46d18486cd35bb senteval/Probing-xprobe/word_content/tr.txt
"""
REFERENCE_GIT_BLOBS: Mapping[str, str] = {
    path: digest for digest, path in (line.split() for line in _REFERENCE_GIT_BLOBS.split("\n")
                                      if line.strip())}


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
