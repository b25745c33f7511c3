# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from ansible_collections.accelerators.gpu.plugins.module_utils.operands.checks.services import served_nodes
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.operands.operand_objects import endpoint


def test_served_nodes_have_a_ready_endpoint_in_any_slice():
    slices = [{'endpoints': [endpoint('a'), endpoint('b', ready=False)]}, {'endpoints': None},
              {'endpoints': [endpoint('c'), {'conditions': {'ready': True}}, {'nodeName': 'd'}]}]
    assert served_nodes(slices) == ['a', 'c']
