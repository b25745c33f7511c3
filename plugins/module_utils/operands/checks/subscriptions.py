# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""OLM Subscriptions: ready when the ClusterServiceVersion the Subscription installed has succeeded; a failed resolution
or a failed CSV is fatal."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .objects import status_of
from .problems import FAILED, new_problem


def subscription_state(namespace, name, subscription, csv):
    """(ready, problems, report) of Subscription namespace/name and the ClusterServiceVersion csv it installed (None
    when it installed none, or it is absent)."""
    status = status_of(subscription)
    csv_name = status.get('installedCSV')
    phase = status_of(csv or {}).get('phase')
    report = {'subscription': {'name': name, 'namespace': namespace, 'state': status.get('state'),
                               'installed_csv': csv_name, 'csv_phase': phase}}
    problems = []
    failed = [c for c in status.get('conditions') or []
              if c.get('type') == 'ResolutionFailed' and c.get('status') == 'True']
    if status.get('state') == 'ResolutionFailed' or failed:
        problems.append(new_problem(FAILED, None, 'Subscription %s/%s cannot be resolved: %s' % (
            namespace, name, '; '.join(c.get('message') or c.get('reason') or '' for c in failed) or 'no message'),
            key=(FAILED, name)))
    if phase == 'Failed':
        problems.append(new_problem(FAILED, None, 'ClusterServiceVersion %s/%s failed: %s' % (
            namespace, csv_name, status_of(csv).get('message') or 'no message'), key=(FAILED, csv_name)))
    return phase == 'Succeeded', problems, report
