"""The router under test on every router node of a lab held by `testbed up --routers`: deployed as `testbed run`
deploys it (testbed.deploy.Deployer, the topology's `router:` driver), without traffic, captures or scenario,
so that a lab can be played with (`testbed ping`, `testbed exec`, `testbed link`).

What the routers are (driver, client library, each node's client address, code folder, python and admin
endpoint, so that `testbed link` tells them of a new bandwidth as the scenario does) is kept in the lab state
(``LabState.routers``) for the commands run from other shells. Ansible's files go to a scratch folder on this
machine under the lab's node folder (``NODE_ROOT/<lab>/.up-routers``), which :meth:`LabRouters.stop` removes with
the routers and what was installed on the nodes, and `testbed clean` with the lab's other node folders when its
holder died.
"""
from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Optional

from testbed.backends.base import NODE_ROOT
from testbed.deploy.deployer import Deployer
from testbed.drivers import driver_for


#: the scratch folder's name in the lab's node folder
SCRATCH = ".up-routers"


class LabRouters:
    def __init__(self, session, ready_timeout_s: float):
        self.session = session
        self.folder = Path(NODE_ROOT) / session.spec.name / SCRATCH
        self.folder.mkdir(parents=True, exist_ok=True)
        self.driver = driver_for(session.spec)
        lab = session.lab
        self.deployer = Deployer(session.spec, lab, self.folder, session.management,
                                 install_dirs={n: session.access(n).work_dir for n in lab.nodes},
                                 start_timeout_s=ready_timeout_s, driver=self.driver)

    def start(self) -> dict:
        """Deploy and start every router; returns what the lab state records of them."""
        endpoints = self.deployer.deploy()
        return {"driver": self.driver.name, "client": self.driver.client, "admin": self.driver.features.admin,
                "nodes": {n: {"client_address": e.client_address, "install_dir": e.install_dir,
                              "code_dir": self.deployer.code_dirs[n], "python": self.deployer.python_of(n),
                              "endpoint": asdict(e)}
                          for n, e in endpoints.items()}}

    def stop(self) -> None:
        """Stop the routers and remove what was installed (the lab itself is the session's to remove)."""
        try:
            self.deployer.stop()
            self.deployer.remove_installs({n: self.session.access(n) for n in self.session.lab.nodes})
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
            try:  # the lab's folder too, when nothing else of the lab is in it (a Mininet lab's is its backend's)
                self.folder.parent.rmdir()
            except OSError:
                pass


def ready_timeout_for(spec, backend: Optional[str]) -> float:
    """How long each router may take to answer after its start, as `testbed run` decides by default."""
    from testbed import machinefit
    from testbed.run.phases import ready_timeout_s

    return ready_timeout_s(None if (backend or spec.backend) == "ssh" else machinefit.check(spec))
