"""Deployment of the router under test with Ansible (ansible-runner + playbooks/).

Deploy knows playbooks and inventories; it knows nothing of Mininet or Docker: it is
given the lab (nodes, links, addresses) and a way to reach each node over SSH.
"""
from testbed.deploy.deployer import Deployer, RouterEndpoint
from testbed.drivers.routerconfig import RouterPorts, router_config
from testbed.deploy.runner import DeployError, TaskFailure

__all__ = ["Deployer", "RouterEndpoint", "RouterPorts", "router_config", "DeployError", "TaskFailure"]
