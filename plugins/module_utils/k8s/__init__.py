# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The only place where the collection talks to the Kubernetes API server: the client (client: one request,
retried through faults, decoded and counted), the typed calls the modules make (api: ClusterAPI), which faults are
retried and how (retry), the views a list is read in and their decoding (views: Table rows; protobuf: metadata in
the protobuf encoding), the errors (errors), and what a server-side apply recorded (applied_fields).

Nothing here imports a feature package: the features import this one."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
