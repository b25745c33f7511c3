# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
name: local
short_description: Run on the controller, the modules in the module worker
version_added: 0.1.0
description:
  - The C(ansible.builtin.local) connection, with one difference. A module Ansible pipes into a Python interpreter
    (pipelining, on by default here) with nothing but the task's C(environment) in front of it (no become, not async)
    runs in the collection's module worker, which has the Kubernetes client imported already, instead of in a new
    interpreter. Every module is taken, C(kubernetes.core.k8s) and C(kubernetes.core.k8s_info) as well as this
    collection's; each returns what it would have returned from its own process.
  - Each module's result says what ran it in its C(accelerators_gpu_worker) - C(served_by=worker) and
    C(handed_by=connection), or C(served_by=module) and the C(reason) the module ran in its own process, which
    verbose output (C(-v)) then says once a run. Nothing of this is a warning or a failure.
  - In the worker process Ansible forks for each task, the objects inherited from the controller are left out of
    Python's garbage collection, so that a collection there does not make the kernel copy the controller's memory.
  - The playbooks of this collection use this connection for the clusters they reach. An inventory that sets
    C(ansible_connection=local) for a cluster's host runs the same tasks, the collection's modules in the worker
    through their action, the others each in its own process.
  - Whatever the worker does not take (it is switched off with E(ACCELERATORS_GPU_WORKER=off), the task has become,
    this ansible-core does not offer what the worker relies on as expected) runs as C(ansible.builtin.local) runs it.
    When no worker runs, one is started, and the module waits for it (30 seconds at most). A worker idle for
    E(ACCELERATORS_GPU_WORKER_IDLE) seconds (120 by default) exits.
author: accelerators.gpu developers (@accelerators-gpu)
options:
  pipelining:
    description:
      - Pipe the modules into their interpreter rather than copy them to a file first, which is what lets the module
        worker run them. As C(ansible.builtin.local)'s option of the same name, on by default.
    type: boolean
    default: true
    env:
      - name: ANSIBLE_PIPELINING
    ini:
      - section: defaults
        key: pipelining
      - section: connection
        key: pipelining
    vars:
      - name: ansible_pipelining
  become_success_timeout:
    description:
      - As C(ansible.builtin.local)'s option of the same name (ansible-core 2.19 on), for a task with become.
    type: int
    default: 10
    vars:
      - name: ansible_local_become_success_timeout
  become_strip_preamble:
    description:
      - As C(ansible.builtin.local)'s option of the same name (ansible-core 2.19 on), for a task with become.
    type: bool
    default: true
    vars:
      - name: ansible_local_become_strip_preamble
notes:
  - The remote user is ignored, as with C(ansible.builtin.local).
  - E(ACCELERATORS_GPU_WORKER_LOG) names a file that gets a line per module the worker ran, C(from=connection) for
    those this connection handed it.
  - What the worker relies on in ansible-core beyond its public interface (the AnsiballZ wrapper's text, a few names
    of C(ansible.module_utils)) is checked once per ansible-core version; see the collection's architecture guide.
seealso:
  - plugin: ansible.builtin.local
    plugin_type: connection
'''

import gc
import multiprocessing

from ansible.plugins.connection.local import Connection as LocalConnection
from ansible_collections.accelerators.gpu.plugins.module_utils.runner import worker as module_worker
from ansible_collections.accelerators.gpu.plugins.module_utils.runner.worker import NotServed
from ansible_collections.accelerators.gpu.plugins.plugin_utils.worker_action import ran_by_ansible, run_piped


class Connection(LocalConnection):
    """ansible.builtin.local; a module piped into its interpreter runs in the module worker when one takes it."""

    # The collection's action leaves the handover to this connection (plugins/plugin_utils/worker_action.py), and
    # takes from it what ran the module, should the module's output hold no result to say it.
    hands_piped_modules_to_the_worker = True
    module_report = None

    def __init__(self, *args, **kwargs):
        super(Connection, self).__init__(*args, **kwargs)
        # In the process Ansible forks for a task, what it inherited from the controller stays out of its garbage
        # collections: a full one would visit every object of the controller's, and so make the kernel copy every
        # memory page that holds one, in a process that runs a single task and exits.
        if multiprocessing.parent_process() is not None:
            gc.freeze()

    def exec_command(self, cmd, in_data=None, sudoable=True):
        if in_data is None:  # not a module piped into its interpreter
            return super(Connection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        try:
            rc, stdout, stderr = run_piped(cmd, in_data, self.cwd, self.become)
        except NotServed as declined:
            rc, stdout, stderr = super(Connection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
            stdout, self.module_report = ran_by_ansible(stdout, str(declined))
        else:
            self.module_report = module_worker.served('connection')
        return rc, stdout, stderr
