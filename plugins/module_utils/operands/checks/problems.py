# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The problems the checks report: each a kind, whether it is fatal, the node, the pod, a key that follows it from one
look to the next, and its text."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .objects import metadata_of, pod_node

# Problem kinds. Fatal ones end a wait at once; stuck ones only once they have lasted the grace period
# (a pod the scheduler cannot place now may fit a moment later; a DaemonSet may create its pods late).
IMAGE, CRASH, CONFIG, FAILED, MISSING = 'image', 'crash', 'config', 'failed', 'missing'
UNSCHEDULABLE, NOT_CREATED, DRIVER_OPTED_OUT = 'unschedulable', 'not-created', 'driver-opted-out'
FATAL_KINDS = (IMAGE, CRASH, CONFIG, FAILED, MISSING)


def new_problem(kind, pod, text, key=None, node=None):
    """A problem of kind, of pod (its node), or of no pod (node: the node, if any); key: by default (kind, the
    pod's uid)."""
    return {'kind': kind, 'fatal': kind in FATAL_KINDS, 'node': node if pod is None else pod_node(pod),
            'pod': None if pod is None else metadata_of(pod).get('name'),
            'key': key or (kind, metadata_of(pod or {}).get('uid')), 'text': text}


def missing_problems(kind, namespace, names, selector, found):
    """Fatal problems of the objects of kind named and absent, or of a selector that matched none."""
    problems = [new_problem(MISSING, None, '%s %s/%s does not exist' % (kind, namespace, name), key=(MISSING, name))
                for name in names]
    if selector and not found and not names:
        problems.append(new_problem(MISSING, None, 'no %s in namespace %s matches %s' % (kind, namespace, selector),
                                    key=(MISSING, kind)))
    return problems
