# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from ansible_collections.accelerators.gpu.plugins.module_utils.operands.checks.allocatable import allocatable_state
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.operands.operand_objects import node


def test_allocatable_by_pattern_and_missing_nodes():
    nodes = [node('a', {'nvidia.com/gpu': '8', 'cpu': '32'}), node('b', {'nvidia.com/gpu': '0'}),
             node('c', {'nvidia.com/mig-1g.10gb': '7', 'nvidia.com/mig-2g.20gb': '2'})]
    assert allocatable_state(nodes, 'nvidia.com/gpu') == {
        'allocatable': {'a': 8, 'b': 0, 'c': 0}, 'node_resources': {'a': 'nvidia.com/gpu'}, 'missing': ['b', 'c']}
    assert allocatable_state(nodes, 'nvidia.com/mig-*')['allocatable']['c'] == 9
    assert allocatable_state(nodes, 'nvidia.com/gpu', expected=['a', 'gone'])['missing'] == ['gone']


def test_allocatable_any_of_several_patterns_names_the_resource_a_workload_requests():
    # Under the mixed strategy: a partitioned node passes with its MIG devices, a whole-GPU node with its GPUs; a node
    # advertising both (some GPUs partitioned) gives a MIG device first, the first by name.
    nodes = [node('whole', {'nvidia.com/gpu': '2', 'nvidia.com/mig-1g.10gb': '0'}),
             node('mig', {'nvidia.com/gpu': '0', 'nvidia.com/mig-2g.20gb': '3', 'nvidia.com/mig-1g.10gb': '7'}),
             node('both', {'nvidia.com/gpu': '1', 'nvidia.com/mig-3g.40gb': '2'}),
             node('none', {'nvidia.com/gpu': '0'})]
    assert allocatable_state(nodes, ['nvidia.com/mig-*', 'nvidia.com/gpu']) == {
        'allocatable': {'both': 2, 'mig': 10, 'none': 0, 'whole': 2},
        'node_resources': {'both': 'nvidia.com/mig-3g.40gb', 'mig': 'nvidia.com/mig-1g.10gb',
                           'whole': 'nvidia.com/gpu'},
        'missing': ['none']}
    # Whole GPUs only: the partitioned node lacks them.
    assert allocatable_state(nodes, ['nvidia.com/gpu'])['missing'] == ['mig', 'none']
