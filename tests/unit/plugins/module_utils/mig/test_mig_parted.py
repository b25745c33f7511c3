# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG layouts in mig-parted's format: what a layout makes of a node's GPUs, and what the device plugin advertises."""

import os

import pytest
import yaml

from ansible_collections.accelerators.gpu.plugins.module_utils.mig.parted import (
    LayoutError, advertised_resources, gpu_layouts, mig_resource)

STOCK = os.path.join(os.path.dirname(__file__), '..', '..', '..', '..', '..', 'roles', 'mig_manager', 'files',
                     'mig-parted-config.yaml')


@pytest.fixture(name='stock')
def stock_layouts():
    with open(STOCK) as stream:
        return yaml.safe_load(stream)


def test_all_1g_10gb_on_two_a100_80gb_gpus_under_each_strategy(stock):
    layouts = gpu_layouts(stock, 'all-1g.10gb', 2, '20b2')
    assert layouts == [{'1g.10gb': 7}, {'1g.10gb': 7}]
    assert advertised_resources(layouts, 'mixed') == {'nvidia.com/gpu': 0, 'nvidia.com/mig-1g.10gb': 14}
    assert advertised_resources(layouts, 'single') == {'nvidia.com/gpu': 14}
    assert advertised_resources(layouts, 'none') == {'nvidia.com/gpu': 2}


def test_all_disabled_gives_the_gpus_back(stock):
    layouts = gpu_layouts(stock, 'all-disabled', 4)
    assert layouts == [None] * 4
    for strategy in ('none', 'single', 'mixed'):
        assert advertised_resources(layouts, strategy) == {'nvidia.com/gpu': 4}


def test_device_filters_pick_the_entry_of_the_gpu_model(stock):
    assert gpu_layouts(stock, 'all-balanced', 1, '20b2') == [{'1g.10gb': 2, '2g.20gb': 1, '3g.40gb': 1}]
    assert gpu_layouts(stock, 'all-balanced', 1, '20b7') == [{'1g.6gb': 2, '2g.12gb': 1}]
    # A GPU no entry selects (unknown model) keeps MIG disabled.
    assert gpu_layouts(stock, 'all-balanced', 1, None) == [None]
    # The single strategy cannot serve several profiles.
    assert advertised_resources(gpu_layouts(stock, 'all-balanced', 2, '20b2'), 'single') == {'nvidia.com/gpu': 0}
    assert advertised_resources(gpu_layouts(stock, 'all-balanced', 2, '20b2'), 'mixed') == {
        'nvidia.com/gpu': 0, 'nvidia.com/mig-1g.10gb': 4, 'nvidia.com/mig-2g.20gb': 2, 'nvidia.com/mig-3g.40gb': 2}


def test_per_index_entries_and_the_mixed_strategy_counts_whole_gpus():
    config = {'mig-configs': {'half': [{'devices': [0, 1], 'mig-enabled': True, 'mig-devices': {'3g.40gb': 2}},
                                       {'devices': [2, 3], 'mig-enabled': False}]}}
    layouts = gpu_layouts(config, 'half', 4)
    assert layouts == [{'3g.40gb': 2}, {'3g.40gb': 2}, None, None]
    assert advertised_resources(layouts, 'mixed') == {'nvidia.com/gpu': 2, 'nvidia.com/mig-3g.40gb': 4}
    assert advertised_resources(layouts, 'single') == {'nvidia.com/gpu': 0}
    assert mig_resource('1g.10gb+me') == 'nvidia.com/mig-1g.10gb.me'


def test_unknown_layouts_and_malformed_entries_are_named(stock):
    with pytest.raises(LayoutError, match='no MIG layout all-9g.1gb .known: all-1g.10gb, '):
        gpu_layouts(stock, 'all-9g.1gb', 1)
    with pytest.raises(LayoutError, match='MIG layout x: mig-enabled must be true or false'):
        gpu_layouts({'mig-configs': {'x': [{'devices': 'all', 'mig-enabled': 'yes'}]}}, 'x', 1)
    with pytest.raises(LayoutError, match='devices must be all or a list of GPU indexes'):
        gpu_layouts({'mig-configs': {'x': [{'devices': 'some', 'mig-enabled': False}]}}, 'x', 1)
    with pytest.raises(LayoutError, match='MIG strategy other is not one of none, single, mixed'):
        advertised_resources([None], 'other')
