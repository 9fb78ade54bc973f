"""The suite's Spark JVMs start with the class-data sharing archive of :mod:`tests.support.spark_cds` (their
start is most of what a Spark test waits for): the session of this worker mapped it, and the drivers of their
own inherit the same options."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.support import spark_cds


def test_the_suites_spark_sessions_map_the_class_data_archive(spark: Any) -> None:
    if not spark_cds.owns_submit_opts():
        pytest.skip(f"SPARK_SUBMIT_OPTS was set by the user ({os.environ.get('SPARK_SUBMIT_OPTS')!r})")
    archive = spark_cds.archive_path()
    assert archive is not None and archive.is_file(), f"no archive at {archive}: see the dump's message above"
    option = f"-XX:SharedArchiveFile={archive}"
    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert option in arguments, arguments
    assert "sharing" in jvm.java.lang.System.getProperty("java.vm.info")  # the JVM mapped an archive
    # The drivers of their own (spark_app tests) start with the same options.
    assert option in os.environ["SPARK_SUBMIT_OPTS"].split()
