"""The lab's links: shaping them, changing them at run time, measuring and verifying them.

* :mod:`testbed.links.shaping`: the tc/iptables plan of one direction of a link and its shaper;
* :mod:`testbed.links.control`: runtime link changes, the scenario timeline's API (``LinkControl``);
* :mod:`testbed.links.change`: `testbed link`: change, take down or up, or show a running lab's link;
* :mod:`testbed.links.measure`: measurements across one direction of a link through the nodes' access;
* :mod:`testbed.links.meter`: the standard-library program those measurements put on the nodes;
* :mod:`testbed.links.verify`: the data-plane verification of every link before traffic starts.
"""
