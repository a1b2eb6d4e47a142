"""A Spark failure that is a memory limit, said in one line a user can act on (which stage, how much it needed,
which setting to raise) instead of a JVM traceback.

Recognised from the failure's text (a classic session's Py4J/captured exception, or a Spark Connect error):

* the results of a stage's tasks exceeding ``spark.driver.maxResultSize`` (Spark says how much they were);
* task results the driver could not keep (``TaskResultLost``: the driver's memory);
* ``java.lang.OutOfMemoryError`` (heap space, GC overhead): in an executor's task when the failure names a
  task or a lost executor, else in the driver; on a local master the executors are the driver's JVM, so the
  setting is the driver's there;
* an executor lost for its memory: Spark's own out-of-memory exit code (52), or a cluster manager's kill that
  says memory (YARN's "exceeding physical memory limits", Kubernetes' "possible container OOM"); a bare exit
  code 137 (a SIGKILL of any cause) is not taken for one.

Anything else is not a memory limit (None): the caller lets it be raised as before.
"""
from __future__ import annotations

import re
from typing import Optional

from runfolder.wording import plural

__all__ = ["memory_limit_line"]

_RESULT_SIZE = re.compile(r"Total size of serialized results of (\d+) tasks \(([^)]+)\) is bigger than "
                          r"(?:spark\.driver\.maxResultSize|maxResultSize) \(([^)]+)\)")
_EXECUTOR_EXIT = re.compile(r"ExecutorLostFailure.*?(?:code:? ?52\b|OutOfMemory|\bOOM\b|exceeding [a-z ]*memory)", re.S)
_IN_TASK = re.compile(r"(Task \d+ in stage [\d.]+ failed|ExecutorLostFailure)")


def memory_limit_line(err: BaseException, stage: str, master: str, driver_memory: str,
                      executor_memory: str) -> Optional[str]:
    """One line for ``err`` when it is a memory limit, during ``stage`` (the analysis' progress line), with the
    session's ``master`` and memory settings; None otherwise."""
    text = str(err)
    local = master.startswith("local")
    where = f"during {stage!r}" if stage else "while starting"
    driver = f"raise spark.driver.memory (--driver-memory, now {driver_memory})"
    m = _RESULT_SIZE.search(text)
    if m:
        return (f"analyze: out of memory {where}: the results of {plural(int(m.group(1)), 'task')} needed "
                f"{m.group(2)} on the driver, more than spark.driver.maxResultSize ({m.group(3)}); raise "
                f"spark.driver.maxResultSize (and spark.driver.memory, --driver-memory, now {driver_memory}, to "
                "hold them)")
    if "TaskResultLost" in text:
        return (f"analyze: out of memory {where}: the driver could not keep its tasks' results (TaskResultLost) "
                f"in its {driver_memory} heap; {driver}")
    if "OutOfMemoryError" in text or "Java heap space" in text or "GC overhead limit exceeded" in text:
        if _IN_TASK.search(text) and not local:
            return (f"analyze: out of memory {where}: a task needed more than an executor's {executor_memory} "
                    f"heap (java.lang.OutOfMemoryError); raise spark.executor.memory")
        return (f"analyze: out of memory {where}: "
                + ("a task" if _IN_TASK.search(text) else "the driver")
                + f" needed more than the driver's {driver_memory} heap (java.lang.OutOfMemoryError); {driver}")
    if _EXECUTOR_EXIT.search(text):
        return (f"analyze: out of memory {where}: an executor was lost running out of its {executor_memory} "
                f"(killed for its memory); raise spark.executor.memory (and spark.executor.memoryOverhead for "
                f"its Python workers)")
    return None
