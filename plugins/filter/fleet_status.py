# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the status playbook over many clusters: each cluster's summary (its entry in the stat gpu_fleet_status)
and the fleet's table and summary lines. The rows, their cells and the ready rule are stack_status's
(module_utils/status/stack_status.py); these filters only count and lay them out."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.accelerators.gpu.plugins.module_utils.status.stack_status import (
    HEADERS, aligned, not_ready_reasons, row_cells)

# The driver_upgrade of a node no driver upgrade is under way on.
AT_REST = ('-', 'upgrade-done')
# How many problems a summary line names; the summary's data carries them all.
SHOWN_PROBLEMS = 3


def _read_failed(result):
    return not isinstance(result, Mapping) or bool(result.get('failed')) or not isinstance(result.get('nodes'), list)


def _error(result):
    """The failed read's message on one line."""
    message = result.get('msg') if isinstance(result, Mapping) else None
    return ' '.join(str(message).split()) if message else 'no status was read'


def driver_of(row):
    """What a node counts under in driver_versions: the version of its loaded driver (stack_status's
    driver_version), else 'host' for a pre-installed driver, 'none' without a driver pod, 'unknown' for a driver pod
    whose version GPU feature discovery has not labelled."""
    if row.get('driver_version'):
        return row['driver_version']
    if row.get('driver') == 'host':
        return 'host'
    return 'none' if row.get('driver') in (None, '-') else 'unknown'


def fleet_status_summary(result):
    """One cluster's summary from its accelerators.gpu.stack_status result (registered, failed or not)."""
    if _read_failed(result):
        return {'ready': False, 'failed': True, 'error': _error(result), 'gpu_nodes': None, 'ready_nodes': None,
                'driver_versions': {}, 'mid_upgrade': None, 'problems': []}
    rows = result['nodes']
    versions = {}
    for row in rows:
        versions[driver_of(row)] = versions.get(driver_of(row), 0) + 1
    problems = ['%s not ready: %s' % (row['node'], ', '.join(not_ready_reasons(row))) for row in rows
                if not row['ready']]
    if not rows:
        problems.append('no GPU node found')
    return {'ready': bool(rows) and all(row['ready'] for row in rows), 'failed': False, 'error': None,
            'gpu_nodes': len(rows), 'ready_nodes': len([row for row in rows if row['ready']]),
            'driver_versions': versions,
            'mid_upgrade': len([row for row in rows if row['driver_upgrade'] not in AT_REST]),
            'problems': problems}


def _plural(count, noun):
    return '%d %s%s' % (count, noun, '' if count == 1 else 's')


def summary_line(cluster, summary):
    """A cluster's line under the fleet's table."""
    if summary['failed']:
        return '%s: status read FAILED: %s' % (cluster, summary['error'])
    versions = sorted(summary['driver_versions'].items(), key=lambda item: (-item[1], item[0]))
    problems = summary['problems']
    told = '; '.join(problems[:SHOWN_PROBLEMS]) + (
        '; and %d more' % (len(problems) - SHOWN_PROBLEMS) if len(problems) > SHOWN_PROBLEMS else '')
    return '%s: %s, %d ready, %s, %d mid-upgrade, %s' % (
        cluster, _plural(summary['gpu_nodes'], 'GPU node'), summary['ready_nodes'],
        'driver ' + ', '.join('%s (%d)' % item for item in versions) if versions else 'no driver',
        summary['mid_upgrade'], '%s: %s' % (_plural(len(problems), 'problem'), told) if problems else 'no problems')


def fleet_status_lines(reads):
    """The table of every cluster's rows (a CLUSTER column, then stack_status's), a summary line per cluster, and
    whether the stack is ready on every cluster. reads: {cluster: its stack_status result}, in the order to show."""
    if not isinstance(reads, Mapping):
        raise AnsibleFilterError('fleet_status_lines: expected a dict of stack_status results by cluster, got %s'
                                 % type(reads).__name__)
    cells = [['CLUSTER'] + [title for _key, title in HEADERS]]
    summaries = []
    for cluster, result in reads.items():
        summary = fleet_status_summary(result)
        summaries.append((str(cluster), summary))
        if not summary['failed']:
            cells.extend([str(cluster)] + row_cells(row) for row in result['nodes'])
    not_ready = ['%s%s' % (cluster, ' (status read failed)' if summary['failed'] else '')
                 for cluster, summary in summaries if not summary['ready']]
    verdict = ('GPU stack ready on every cluster' if summaries and not not_ready
               else 'GPU stack NOT ready on %s' % (', '.join(not_ready) or 'any cluster: no cluster read'))
    return aligned(cells) + [summary_line(cluster, summary) for cluster, summary in summaries] + [verdict]


class FilterModule(object):
    def filters(self):
        return {'fleet_status_summary': fleet_status_summary, 'fleet_status_lines': fleet_status_lines}
