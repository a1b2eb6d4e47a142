"""Reading (and writing reports into) a results folder given as a local path or any Hadoop URI."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import List, Optional

__all__ = ["ResultsStore", "ResultsStoreError"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class ResultsStoreError(ValueError):
    """The results folder cannot be read at all (missing, not a folder)."""


class ResultsStore:
    """A results folder: local files are read directly; URIs (hdfs://, s3a://, file://...) through Hadoop."""

    def __init__(self, location: str, spark=None):
        self.location = str(location).rstrip("/") or "/"
        self.is_local = not _SCHEME.match(self.location)
        self.spark = spark
        if self.is_local:
            self.root = Path(self.location).resolve()
            if not self.root.exists():
                raise ResultsStoreError(f"results folder {self.location} does not exist")
            if not self.root.is_dir():
                raise ResultsStoreError(f"{self.location} is not a folder (give the results/<run-id> folder)")
        else:
            if spark is None:
                raise ResultsStoreError(f"{self.location} is a URI: reading it needs a Spark session")
            self._jvm = spark.sparkContext._jvm
            self._conf = spark.sparkContext._jsc.hadoopConfiguration()
            self._fs = self._hpath(self.location).getFileSystem(self._conf)
            if not self._fs.exists(self._hpath(self.location)):
                raise ResultsStoreError(f"results folder {self.location} does not exist")

    # -- names --

    def uri(self, rel: str = "") -> str:
        """What Spark readers take for ``rel`` (an absolute path or a URI)."""
        if self.is_local:
            return str(self.root / rel) if rel else str(self.root)
        return f"{self.location}/{rel}" if rel else self.location

    def _hpath(self, uri: str):
        return self._jvm.org.apache.hadoop.fs.Path(uri)

    # -- reading --

    def exists(self, rel: str) -> bool:
        if self.is_local:
            return (self.root / rel).exists()
        return bool(self._fs.exists(self._hpath(self.uri(rel))))

    def size(self, rel: str) -> Optional[int]:
        if not self.exists(rel):
            return None
        if self.is_local:
            return (self.root / rel).stat().st_size
        return int(self._fs.getFileStatus(self._hpath(self.uri(rel))).getLen())

    def list(self, rel_dir: str, suffix: str = "", prefix: str = "") -> List[str]:
        """Names of the files directly in ``rel_dir`` (sorted), filtered by prefix and suffix."""
        if self.is_local:
            d = self.root / rel_dir
            names = [p.name for p in d.iterdir() if p.is_file()] if d.is_dir() else []
        else:
            p = self._hpath(self.uri(rel_dir))
            if not self._fs.exists(p):
                return []
            names = [s.getPath().getName() for s in self._fs.listStatus(p) if s.isFile()]
        return sorted(n for n in names if n.endswith(suffix) and n.startswith(prefix) and not n.startswith("."))

    def list_dirs(self, rel_dir: str) -> List[str]:
        if self.is_local:
            d = self.root / rel_dir
            return sorted(p.name for p in d.iterdir() if p.is_dir()) if d.is_dir() else []
        p = self._hpath(self.uri(rel_dir))
        if not self._fs.exists(p):
            return []
        return sorted(s.getPath().getName() for s in self._fs.listStatus(p) if s.isDirectory())

    def read_bytes(self, rel: str) -> Optional[bytes]:
        if not self.exists(rel):
            return None
        if self.is_local:
            return (self.root / rel).read_bytes()
        stream = self._fs.open(self._hpath(self.uri(rel)))
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def read_text(self, rel: str) -> Optional[str]:
        data = self.read_bytes(rel)
        return None if data is None else data.decode("utf-8", errors="replace")

    def read_json(self, rel: str):
        """Parsed JSON, None when missing; raises ValueError naming the file when it is not JSON."""
        text = self.read_text(rel)
        if text is None:
            return None
        try:
            return json.loads(text)
        except ValueError as err:
            raise ValueError(f"{rel} is not valid JSON: {err}") from None

    # -- writing --

    def write_bytes(self, rel: str, data: bytes) -> None:
        if self.is_local:
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
            return
        out = self._fs.create(self._hpath(self.uri(rel)), True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()

    def write_text(self, rel: str, text: str) -> None:
        self.write_bytes(rel, text.encode("utf-8"))

    # -- a table too large to collect --

    def write_and_read(self, df, rel: str):
        """``df`` written by the executors as Parquet at ``rel`` and read back from there (Spark): later uses
        read the table instead of computing its lineage again."""
        df.write.mode("overwrite").parquet(self.uri(rel))
        return df.sparkSession.read.parquet(self.uri(rel))
