"""Reading (and writing reports into) a results folder given as a local path or any Hadoop URI."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import List, Optional

__all__ = ["ResultsStore", "ResultsStoreError"]

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


class ResultsStoreError(ValueError):
    """The results folder cannot be read at all (missing, not a folder)."""


class _HadoopFiles:
    """A URI's files through Hadoop's FileSystem in this process' JVM (a classic session's)."""

    def __init__(self, spark, location: str):
        self._jvm = spark.sparkContext._jvm
        self._fs = self._path(location).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def _path(self, uri: str):
        return self._jvm.org.apache.hadoop.fs.Path(uri)

    def exists(self, uri: str) -> bool:
        return bool(self._fs.exists(self._path(uri)))

    def size(self, uri: str) -> int:
        return int(self._fs.getFileStatus(self._path(uri)).getLen())

    def entries(self, uri: str, dirs: bool) -> List[str]:
        """Names of the files (``dirs``: the folders) directly in ``uri``."""
        return [st.getPath().getName() for st in self._fs.listStatus(self._path(uri))
                if (st.isDirectory() if dirs else st.isFile())]

    def read(self, uri: str) -> bytes:
        stream = self._fs.open(self._path(uri))
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def write(self, uri: str, data: bytes) -> None:
        out = self._fs.create(self._path(uri), True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()


#: Hadoop's scheme -> pyarrow's, where they differ
_ARROW_SCHEMES = {"s3a": "s3", "s3n": "s3", "gs": "gs"}


class _ArrowFiles:
    """A URI's files through pyarrow's file systems (file, hdfs, s3/s3a, gs), for a Spark Connect session: its
    JVM is the server's, so this process reads and writes the folder's small files itself (Spark still reads
    the captures and writes the tables through the server's Hadoop)."""

    def __init__(self, location: str):
        from pyarrow import fs

        self._fs_module = fs
        scheme = location.split("://", 1)[0]
        arrow_uri = _ARROW_SCHEMES.get(scheme, scheme) + location[len(scheme):]
        try:
            self._fs, self._root = fs.FileSystem.from_uri(arrow_uri)
        except Exception as err:  # noqa: BLE001 - pyarrow's error for an unknown or unreachable scheme varies
            raise ResultsStoreError(f"{location}: this process cannot reach it to read the folder's small files "
                                    f"beside Spark Connect ({err}); use --master, or a file://, hdfs://, s3a:// "
                                    "or gs:// folder") from None
        self._location = location

    def _p(self, uri: str) -> str:
        """pyarrow's path of ``uri`` (the folder's URI or a URI inside it)."""
        return self._root + uri[len(self._location):]

    def _info(self, uri: str):
        return self._fs.get_file_info(self._p(uri))

    def exists(self, uri: str) -> bool:
        return self._info(uri).type != self._fs_module.FileType.NotFound

    def size(self, uri: str) -> int:
        return int(self._info(uri).size)

    def entries(self, uri: str, dirs: bool) -> List[str]:
        want = self._fs_module.FileType.Directory if dirs else self._fs_module.FileType.File
        return [i.base_name for i in self._fs.get_file_info(self._fs_module.FileSelector(self._p(uri)))
                if i.type == want]

    def read(self, uri: str) -> bytes:
        with self._fs.open_input_stream(self._p(uri)) as stream:
            return stream.read()

    def write(self, uri: str, data: bytes) -> None:
        path = self._p(uri)
        self._fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with self._fs.open_output_stream(path) as out:
            out.write(data)


class ResultsStore:
    """A results folder: local files are read directly; URIs (hdfs://, s3a://, file://...) through Hadoop (a
    Spark Connect session's: through pyarrow, see ``_ArrowFiles``)."""

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
            from .session import is_connect

            self._files = _ArrowFiles(self.location) if is_connect(spark) else _HadoopFiles(spark, self.location)
            if not self._files.exists(self.location):
                raise ResultsStoreError(f"results folder {self.location} does not exist")

    # -- names --

    def uri(self, rel: str = "") -> str:
        """What Spark readers take for ``rel`` (an absolute path or a URI)."""
        if self.is_local:
            return str(self.root / rel) if rel else str(self.root)
        return f"{self.location}/{rel}" if rel else self.location

    # -- reading --

    def exists(self, rel: str) -> bool:
        if self.is_local:
            return (self.root / rel).exists()
        return self._files.exists(self.uri(rel))

    def size(self, rel: str) -> Optional[int]:
        if not self.exists(rel):
            return None
        if self.is_local:
            return (self.root / rel).stat().st_size
        return self._files.size(self.uri(rel))

    def list(self, rel_dir: str, suffix: str = "", prefix: str = "") -> List[str]:
        """Names of the files directly in ``rel_dir`` (sorted), filtered by prefix and suffix."""
        if self.is_local:
            d = self.root / rel_dir
            names = [p.name for p in d.iterdir() if p.is_file()] if d.is_dir() else []
        else:
            names = self._files.entries(self.uri(rel_dir), dirs=False) if self.exists(rel_dir) else []
        return sorted(n for n in names if n.endswith(suffix) and n.startswith(prefix) and not n.startswith("."))

    def list_dirs(self, rel_dir: str) -> List[str]:
        if self.is_local:
            d = self.root / rel_dir
            return sorted(p.name for p in d.iterdir() if p.is_dir()) if d.is_dir() else []
        return sorted(self._files.entries(self.uri(rel_dir), dirs=True)) if self.exists(rel_dir) else []

    def read_bytes(self, rel: str) -> Optional[bytes]:
        if not self.exists(rel):
            return None
        if self.is_local:
            return (self.root / rel).read_bytes()
        return self._files.read(self.uri(rel))

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
        self._files.write(self.uri(rel), data)

    def write_text(self, rel: str, text: str) -> None:
        self.write_bytes(rel, text.encode("utf-8"))

    def write_frame(self, rel: str, pdf, schema) -> bool:
        """A table the driver holds (pandas) as Parquet at ``rel`` in Spark's types (``schema``: a StructType),
        replacing what was there. A local folder's is written here by pyarrow, no Spark job: one
        ``part-0.parquet`` and Spark's ``_SUCCESS``, made beside it and put in place when whole. Values convert
        as Spark's Arrow path converts a pandas frame (a NaN or None is a null; pyarrow checks types less strictly
        than Spark's row path: the frames given are the driver's own). False when the frame does not convert or
        the folder cannot be written here (the caller writes it through Spark), and for a URI's folder."""
        if not self.is_local:
            return False
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark.sql.pandas.types import to_arrow_schema

        try:
            table = pa.Table.from_pandas(pdf[list(schema.names)], schema=to_arrow_schema(schema), preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
            return False
        try:
            staging = self.stage_table(rel)
            pq.write_table(table, staging / "part-0.parquet")
            self.publish_staged(rel)
        except OSError:
            self.discard_staged(rel)
            return False
        return True

    def stage_table(self, rel: str) -> Path:
        """An empty folder beside the local table ``rel`` (hidden from readers: ``.<name>.writing``) to write its
        Parquet files into, here or on the executors; :meth:`publish_staged` puts it in place."""
        staging = self._staging(rel)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        return staging

    def publish_staged(self, rel: str) -> None:
        """The staged folder of ``rel``, with Spark's ``_SUCCESS``, in place of the table that was there."""
        staging, path = self._staging(rel), self.root / rel
        (staging / "_SUCCESS").touch()
        if path.exists():
            shutil.rmtree(path)
        staging.rename(path)

    def discard_staged(self, rel: str) -> None:
        shutil.rmtree(self._staging(rel), ignore_errors=True)

    def _staging(self, rel: str) -> Path:
        if not self.is_local:
            raise ValueError(f"{self.location}: a table is staged only in a local folder")
        path = self.root / rel
        return path.with_name(f".{path.name}.writing")

    # -- a table too large to collect --

    @staticmethod
    def write_part(table, folder: str, index: int, row_groups=None, metadata: Optional[dict] = None) -> None:
        """An executor's share of a staged table (:meth:`stage_table`): the pyarrow ``table`` as
        ``part-<index>.parquet`` in ``folder``, put in place whole (a task run again replaces it). ``row_groups``:
        ``(start, end)`` row ranges, one row group each (a reader can then read a range alone); ``metadata``:
        key-value pairs for the file's schema (bytes or str)."""
        import os
        import uuid

        import pyarrow.parquet as pq

        path = os.path.join(folder, f"part-{index:05d}.parquet")
        # hidden from readers, and one per attempt (a retried or speculative task's twin writes its own)
        staging = os.path.join(folder, f".part-{index:05d}.{uuid.uuid4().hex}.writing")
        try:
            if row_groups is None:
                pq.write_table(table, staging)
            else:  # a row group per [start, end) given, in order; any rows after the last end are not written
                schema = table.schema.with_metadata({**(table.schema.metadata or {}), **(metadata or {})})
                with pq.ParquetWriter(staging, schema) as writer:
                    for start, end in row_groups:
                        writer.write_table(table.slice(start, end - start).replace_schema_metadata(schema.metadata),
                                           row_group_size=max(1, end - start))
            os.replace(staging, path)
        finally:
            if os.path.exists(staging):
                os.remove(staging)


    def collect_through_parquet(self, df, rel: str, arrow: bool = False):
        """``df`` (Spark) as pandas (``arrow``: as a pyarrow Table), through Parquet at ``rel``: the executors
        write it; a local folder is read with pyarrow, so the rows never pass through the JVM's task results
        (collecting ~100 MB of them with ``toPandas()`` on ``local[2]`` loses them: ``TaskResultLost``); a URI
        is read back through Spark."""
        df.write.mode("overwrite").parquet(self.uri(rel))
        if self.is_local:
            import pyarrow.parquet as pq

            table = pq.read_table(self.root / rel)
            return table if arrow else table.to_pandas()
        back = self.spark.read.parquet(self.uri(rel))
        return back.toArrow() if arrow else back.toPandas()
