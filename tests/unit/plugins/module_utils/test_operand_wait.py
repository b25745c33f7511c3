# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from ansible_collections.accelerators.gpu.plugins.module_utils.operand_wait import WAIT_ARGUMENT_SPEC, job_summary, wait_params
from ansible_collections.accelerators.gpu.plugins.module_utils.validation import validation_plan


def test_a_job_summary_keeps_what_a_validation_plan_reads():
    job = {'apiVersion': 'batch/v1', 'kind': 'Job',
           'metadata': {'name': 'v', 'namespace': 'gpu', 'uid': 'u', 'managedFields': [{}],
                        'annotations': {'accelerators.gpu/node': 'a', 'accelerators.gpu/validated-pods': 'p1'}},
           'spec': {'template': {'spec': {'containers': [{'name': 'c'}]}}},
           'status': {'succeeded': 1, 'conditions': [{'type': 'Complete', 'status': 'True'}]}}
    summary = job_summary(job)
    assert summary == {'metadata': {'name': 'v', 'namespace': 'gpu', 'annotations': job['metadata']['annotations']},
                       'status': {'conditions': [{'type': 'Complete', 'status': 'True'}]}}
    assert validation_plan([summary], ['a'], {'a': 'p1'}) == validation_plan([job], ['a'], {'a': 'p1'})


def test_wait_params_are_the_defaults_and_what_is_given():
    params = wait_params('daemonsets', namespace='gpu', names=['d'], timeout=9)
    assert set(params) == set(WAIT_ARGUMENT_SPEC) | {'wait_for'}
    assert (params['wait_for'], params['timeout'], params['grace'], params['label_selectors']) == ('daemonsets', 9, 20, [])
