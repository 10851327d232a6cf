"""What is wrong with a file that ``torch.load`` cannot read: not a checkpoint at all, or one cut short.

torch's own errors for these ("mmap can only be used with files saved with torch.save", "[Errno 22]
Invalid argument", an unpickling error that reads like code in the file) do not tell a user that the
file is something else, or a copy that stopped early. ``damage_of`` looks at the bytes instead: a
checkpoint is a zip archive (``torch.save``'s format since torch 1.6) or torch's older pickle stream;
a zip archive without its closing directory was cut short, and its first record (``data.pkl``, the
checkpoint's structure) says how many bytes of tensors should follow. Nothing in the file is run:
the structure is read by torch's weights-only unpickler, with placeholder storages.
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
from pathlib import Path

import torch
from torch._weights_only_unpickler import Unpickler  # the reader of torch.load(weights_only=True)

ZIP_MAGIC = b"PK\x03\x04"
LEGACY_MAGIC = pickle.dumps(torch.serialization.MAGIC_NUMBER, protocol=2)[:-1]  # torch's pre-1.6 format
LOCAL_HEADER = 30  # bytes of a zip record's fixed header, before its name and extra field


def damage_of(path: str | Path) -> str | None:
    """Why ``path`` cannot be a checkpoint ("is not a checkpoint: ...", "is truncated: N of at least M bytes"),
    or None when its bytes look like one (the reason for a failed load lies elsewhere)."""
    try:
        size = Path(path).stat().st_size
        with open(path, "rb") as file:
            head = file.read(max(len(ZIP_MAGIC), len(LEGACY_MAGIC)))
    except OSError:
        return None  # unreadable: the caller's own error says why
    if size == 0:
        return "is empty (0 bytes): not a checkpoint"
    if head.startswith(LEGACY_MAGIC):
        return None
    if not head.startswith(ZIP_MAGIC):
        return (f"is not a checkpoint: it begins with the bytes {head[:4].hex(' ')}, where a file of torch.save begins "
                f"with a zip header ({ZIP_MAGIC.hex(' ')})")
    if zipfile.is_zipfile(path):
        return None
    needed = bytes_needed(path)
    extent = f"{size:,} of at least {needed:,} bytes" if needed and needed > size else f"{size:,} bytes"
    return (f"is truncated: {extent}; the zip directory that closes every checkpoint is missing (a copy or save cut "
            "short)")


def bytes_needed(path: str | Path) -> int | None:
    """A lower bound of a torch zip checkpoint's size: its structure record and the tensor bytes it names;
    None when even the structure record is cut."""
    with open(path, "rb") as file:
        data = file.read()
    if len(data) < LOCAL_HEADER:
        return None
    name_length, extra_length = struct.unpack("<HH", data[26:LOCAL_HEADER])
    start = LOCAL_HEADER + name_length + extra_length
    stream = io.BytesIO(data[start:])
    storage_bytes: dict[str, int] = {}

    def placeholder(saved_id: tuple) -> torch.storage.TypedStorage:
        _, storage_type, key, _, numel = saved_id
        dtype = torch.uint8 if storage_type is torch.UntypedStorage else storage_type.dtype
        storage_bytes[key] = numel * dtype.itemsize
        untyped = torch.UntypedStorage(storage_bytes[key], device="meta")  # no memory, no bytes read
        return torch.storage.TypedStorage(wrap_storage=untyped, dtype=dtype, _internal=True)

    unpickler = Unpickler(stream, encoding="utf-8")
    unpickler.persistent_load = placeholder
    try:
        unpickler.load()
    except Exception:  # noqa: BLE001  (a structure record cut or damaged too: no bound to give)
        return None
    return start + stream.tell() + sum(storage_bytes.values())
