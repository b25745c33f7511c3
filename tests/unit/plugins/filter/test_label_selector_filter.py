# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The label_selector filter: a node selector as the list API's label selector string."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.accelerators.gpu.plugins.filter.label_selector import FilterModule, label_selector


def test_labels_become_sorted_key_value_terms_and_none_selects_everything():
    assert label_selector({'nvidia.com/gpu.present': 'true', 'node-role.kubernetes.io/worker': ''}) == (
        'node-role.kubernetes.io/worker=,nvidia.com/gpu.present=true')
    assert label_selector({}) == '' and label_selector(None) == ''
    assert FilterModule().filters()['label_selector'] is label_selector
