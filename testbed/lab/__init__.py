"""The lab lifecycle: build a lab from a topology and take it down again, keep it for other shells, find and
remove what dead labs left, and the commands on a lab that is up.

- session: LabSession, the one "lab, then its management access" sequence (`testbed run`, `testbed up`, tests)
- capabilities: shaping the topology asks for that the kernel lacks, refused before anything is built
- shape: install every link direction's shaping and record what was installed
- errors: LabError, what stops a lab from being built (bad input or the environment)
- state: a lab's state on disk (owner, plan, what was built), found from any shell
- holder: the background process of `testbed up` that keeps a lab
- routers: the routers of `testbed up --routers`
- clean: `testbed clean`, what crashed or killed labs left
- inspect, ping, shell: `testbed inspect`, `testbed ping`, `testbed exec`'s shell
"""
