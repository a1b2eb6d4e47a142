"""The interactive shell of `testbed exec LAB NODE` (no command): a prompt that names the lab and the node.

The command runs inside the node through its backend's ``exec_argv``, so it is the same on every backend.
Where the node's hostname is not its name (a Mininet host shares this machine's; a lab machine has its own),
the shell gets a UTS namespace of its own (``unshare --uts``) whose hostname is the node's, when the node
allows it; otherwise only the prompt and ``$HOSTNAME`` name the node. Docker containers are already named
after their node. Bash is started without rc files (a user's ``.bashrc`` would set the prompt back);
without bash, ``sh``.
"""
from __future__ import annotations

import shlex

#: runs as ``sh -c INNER testbed-shell NODE LAB OWN_UTS``; sets the hostname only in a UTS namespace of its own
INNER = r"""
node=$1 lab=$2
if [ "$3" = 1 ]; then hostname "$node"; fi
export HOSTNAME="$node" TESTBED_LAB="$lab" TESTBED_NODE="$node"
if command -v bash >/dev/null 2>&1; then
  export PS1="[$lab] \u@$node:\w\\$ "
  exec bash --norc -i
fi
export PS1="[$lab] $node# "
exec sh -i
"""

#: chooses whether the shell gets a UTS namespace of its own (``unshare`` present and allowed)
OUTER = r"""
inner=$1; shift
if [ "$(hostname)" != "$1" ] && command -v unshare >/dev/null 2>&1 && unshare --uts true 2>/dev/null; then
  exec unshare --uts sh -c "$inner" testbed-shell "$1" "$2" 1
fi
exec sh -c "$inner" testbed-shell "$1" "$2" 0
"""


def shell_argv(lab: str, node: str) -> list[str]:
    """The command that opens the node's interactive shell (to run inside the node)."""
    return ["sh", "-c", OUTER, "testbed-shell", INNER, node, lab]


def describe(lab: str, node: str) -> str:
    """The line `testbed exec` prints before the shell opens."""
    return f"shell in node {node} of lab {lab} (exit or Ctrl-D to leave); one command: " \
           f"`testbed exec {shlex.quote(lab)} {shlex.quote(node)} -- CMD`"
