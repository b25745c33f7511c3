# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The DCGM exporter's health fields, as samples {name, labels, value}: from its own page (Prometheus' text format,
what GET :9400/metrics answers) or from a Prometheus query (its JSON vector). Pure.

The fields are on by default in dcgm-exporter's etc/default-counters.csv. Each series is one GPU, labelled gpu (its
index), UUID, pci_bus_id, device, modelName, Hostname (the node) and, where a pod uses the GPU, namespace, pod and
container.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# A gauge: the last XID the GPU reported, 0 for none.
XID_ERRORS = 'DCGM_FI_DEV_XID_ERRORS'
# Row remapping failed (XID 64's cause): the GPU's memory cannot retire a failing row any more.
ROW_REMAP_FAILURE = 'DCGM_FI_DEV_ROW_REMAP_FAILURE'
# Rows remapped after uncorrectable errors, told beside a remap failure.
UNCORRECTABLE_REMAPPED_ROWS = 'DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS'
FIELDS = (XID_ERRORS, ROW_REMAP_FAILURE, UNCORRECTABLE_REMAPPED_ROWS)
# The label naming the node of a series (the exporter's NODE_NAME).
HOSTNAME = 'Hostname'

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_ESCAPES = {'\\\\': '\\', '\\"': '"', '\\n': '\n'}


def _unescaped(value):
    return re.sub(r'\\[\\"n]', lambda match: _ESCAPES[match.group(0)], value)


def _labels(text):
    """The labels of a sample's {...}; ValueError for text that is no label list."""
    labels, position = {}, 0
    while position < len(text):
        match = _LABEL.match(text, position)
        if not match:
            if text[position:].strip():
                raise ValueError('malformed labels {%s}' % text)
            break
        labels[match.group(1)] = _unescaped(match.group(2))
        position = match.end()
    return labels


def _number(text):
    """A sample's value: a float; NaN and the infinities as Prometheus writes them."""
    return float({'+Inf': 'inf', '-Inf': '-inf', 'NaN': 'nan'}.get(text, text))


def parse_text(text, names=FIELDS):
    """The samples of the metrics named (names) on an exporter's page (Prometheus' text exposition format), in their
    order: [{name, labels, value}]. Comments and other metrics are skipped; a malformed line of a metric named raises
    ValueError naming it."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith('#') or not line.startswith(tuple(names)):
            continue
        match = _SAMPLE.match(line)
        if not match or match.group(1) not in names:
            if match:
                continue  # another metric whose name starts with a name wanted
            raise ValueError('malformed metrics line: %s' % line)
        try:
            samples.append({'name': match.group(1), 'labels': _labels(match.group(2) or ''),
                            'value': _number(match.group(3))})
        except ValueError as error:
            raise ValueError('%s: %s' % (error, line))
    return samples


def parse_vector(answer, name):
    """The samples of a Prometheus instant query's answer (GET /api/v1/query: {status, data: {resultType: vector,
    result: [{metric, value: [time, "value"]}]}}) of the metric name. ValueError for an answer that is not a
    successful vector."""
    if not isinstance(answer, dict) or answer.get('status') != 'success':
        raise ValueError('the query of %s failed: %s' % (name, (answer or {}).get('error') if isinstance(
            answer, dict) else answer))
    data = answer.get('data') or {}
    if data.get('resultType') != 'vector':
        raise ValueError('the query of %s answered a %s, not a vector' % (name, data.get('resultType')))
    samples = []
    for series in data.get('result') or []:
        labels = dict(series.get('metric') or {})
        samples.append({'name': labels.pop('__name__', name), 'labels': labels,
                        'value': _number(str((series.get('value') or [None, 'NaN'])[1]))})
    return samples
