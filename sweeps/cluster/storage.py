"""Tune's storage as a filesystem: a local path, a ``file://`` URI or a cloud URI (``s3://``,
``gs://``, ...), each opened through pyarrow, as Tune itself opens it, so that what the sweep
deletes or prunes there is found the same way whatever the storage is (a bucket's
``bucket/...`` is never read as a local path)."""

from __future__ import annotations

from pathlib import Path


def open_path(where: str | Path):
    """(pyarrow filesystem, path in it) of a local path or a URI."""
    import pyarrow.fs

    text = str(where)
    if "://" not in text:
        return pyarrow.fs.LocalFileSystem(), str(Path(text).expanduser().resolve())
    return pyarrow.fs.FileSystem.from_uri(text)


def join(where: str | Path, *names: str) -> str:
    """``where`` / names, for a local path or a URI alike."""
    return "/".join([str(where).rstrip("/"), *names])


def is_dir(where: str | Path) -> bool:
    import pyarrow.fs

    filesystem, path = open_path(where)
    return filesystem.get_file_info(path).type == pyarrow.fs.FileType.Directory


def delete_dir(where: str | Path) -> bool:
    """Delete the folder ``where`` and all it holds; False where there was none."""
    if not is_dir(where):
        return False
    filesystem, path = open_path(where)
    filesystem.delete_dir(path)
    return True


def subfolders(where: str | Path, prefix: str = "") -> list[str]:
    """The folders directly in ``where`` whose names start with ``prefix``, as ``where``/name
    (local paths or URIs, as ``where`` is); none where ``where`` is no folder."""
    import pyarrow.fs

    if not is_dir(where):
        return []
    filesystem, path = open_path(where)
    found = filesystem.get_file_info(pyarrow.fs.FileSelector(path))
    names = [
        info.base_name
        for info in found
        if info.type == pyarrow.fs.FileType.Directory and info.base_name.startswith(prefix)
    ]
    return [join(where, name) for name in sorted(names)]
