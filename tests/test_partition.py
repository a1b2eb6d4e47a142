"""tests/partition.py: the files listed to run beside the lab tests exist, each partition collects only its
own files, and a listed test that asks for a lab fails there naming the list."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests import partition
from tests.conftest import no_lab_beside

HERE = Path(__file__).resolve().parent


def test_every_listed_file_exists_and_is_a_test_file():
    assert partition.missing_files() == []
    assert all(Path(f).name.startswith("test_") for f in partition.BESIDE_LABS)
    assert len(set(partition.BESIDE_LABS)) == len(partition.BESIDE_LABS)


def test_a_listed_file_runs_beside_and_any_other_with_the_labs():
    assert partition.runs_beside(HERE / "spark" / "test_spark_bounds.py")
    assert not partition.runs_beside(HERE / "run" / "test_run_e2e.py")
    assert not partition.runs_beside(Path("/elsewhere/tests/spark/test_spark_bounds.py"))


def test_the_partition_is_beside_labs_or_unset(monkeypatch):
    for value in ("beside", "labs", ""):
        monkeypatch.setenv(partition.PARTITION_ENV, value)
        assert partition.partition() == value
    monkeypatch.setenv(partition.PARTITION_ENV, "lab")
    with pytest.raises(ValueError, match="use 'beside', 'labs' or leave it unset"):
        partition.partition()


def test_a_lab_asked_for_beside_the_lab_tests_fails_naming_the_list(monkeypatch):
    monkeypatch.setenv(partition.PARTITION_ENV, "labs")
    no_lab_beside("the kernel probe (caps)")  # with the labs: fine
    monkeypatch.setenv(partition.PARTITION_ENV, "beside")
    with pytest.raises(pytest.fail.Exception, match="take its file out of tests/partition.py's BESIDE_LABS"):
        no_lab_beside("the kernel probe (caps)")
