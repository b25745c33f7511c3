# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Deployments: whether one is ready, every replica it wants updated and available."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .objects import as_int, metadata_of, status_of


def deployment_state(deployment):
    """Readiness of one Deployment: ready when its status describes the current spec (observedGeneration) and every
    replica it wants is updated and available."""
    meta, status = metadata_of(deployment), status_of(deployment)
    replicas = as_int((deployment.get('spec') or {}).get('replicas', 1))
    updated, available = as_int(status.get('updatedReplicas')), as_int(status.get('availableReplicas'))
    observed = as_int(status.get('observedGeneration')) >= as_int(meta.get('generation'))
    return {'name': meta.get('name'), 'namespace': meta.get('namespace'), 'replicas': replicas, 'updated': updated,
            'available': available, 'ready': observed and updated >= replicas and available >= replicas}
