# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.cluster_api import TaskError
from ansible_collections.accelerators.gpu.plugins.module_utils.node_facts import OPERANDS, node_facts
from ansible_collections.accelerators.gpu.plugins.module_utils.node_inventory import missing_nfd, run, wait_for_nfd
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.fakes import FakeCluster, FakeModule
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.nodes import (
    RHCOS_416, RHCOS_418, make_node, rhcos_node)

DRIVER = 'nvidia.com/gpu.deploy.driver'
PRESENT = 'nvidia.com/gpu.present'


def params(**overrides):
    base = {'label_selector': None, 'page_size': 500, 'wait': False, 'wait_timeout': 300, 'wait_sleep': 5,
            'min_gpu_nodes': 0, 'manage_labels': False, 'labels_state': 'present', 'operands': None,
            'return_labels': False}
    base.update(overrides)
    return base


def bare_node(name):
    """A node NFD has not labelled yet."""
    return make_node(name, {}, 'Red Hat Enterprise Linux CoreOS %s (Plow)' % RHCOS_416, '5.14.0-427.33.1.el9_4.x86_64')


class Clock:
    """time.monotonic and time.sleep for a test: sleeping advances the clock, and runs what is due then."""

    def __init__(self, events=None):
        self.now = 0.0
        self.events = dict(events or {})
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds
        for due in sorted(t for t in self.events if t <= self.now):
            self.events.pop(due)()


def test_missing_nfd_every_ready_node_or_n_gpu_nodes():
    facts = [node_facts(node) for node in (rhcos_node('w1'), bare_node('w2'), rhcos_node('cpu', gpu=False))]
    assert missing_nfd(facts) == (
        '1 of 3 Ready untainted node(s) have no NFD labels; Ready untainted nodes without feature.node.kubernetes.io/ labels: w2')
    assert missing_nfd(facts, min_gpu_nodes=1) is None
    assert missing_nfd(facts, min_gpu_nodes=2) == (
        '1 GPU node(s) found (w1), at least 2 wanted; Ready untainted nodes without feature.node.kubernetes.io/ labels: w2')
    assert missing_nfd([]) == 'no Ready untainted node matches the label selector yet'
    assert missing_nfd(facts[:1]) is None


def test_missing_nfd_does_not_wait_for_a_node_not_ready_or_tainted():
    down = make_node('down', {}, 'Red Hat Enterprise Linux CoreOS %s (Plow)' % RHCOS_416, ready=False)
    master = dict(bare_node('master'), spec={'taints': [{'key': 'node-role.kubernetes.io/master', 'effect': 'NoSchedule'}]})
    assert missing_nfd([node_facts(rhcos_node('w1')), node_facts(down), node_facts(master)]) is None
    # A node still registering carries the not-ready taint, which goes with it: NFD will label it.
    registering = dict(bare_node('new'), spec={'taints': [{'key': 'node.kubernetes.io/not-ready', 'effect': 'NoSchedule'}]})
    assert missing_nfd([node_facts(rhcos_node('w1')), node_facts(registering)]).startswith('1 of 2 Ready untainted')
    assert missing_nfd([node_facts(down)]) == 'no Ready untainted node matches the label selector yet'


def test_wait_polls_until_nfd_labels_arrive():
    cluster = FakeCluster([rhcos_node('w1'), bare_node('w2')])
    clock = Clock({10: lambda: cluster.nodes.update(w2=rhcos_node('w2'))})
    facts, versions, waited = wait_for_nfd(cluster, params(wait=True), clock, clock.sleep)
    assert [f['name'] for f in facts if f['nfd_labelled']] == ['w1', 'w2']
    assert (waited, clock.sleeps) == (10, [5, 5])
    assert sorted(versions) == ['w1', 'w2']


def test_wait_times_out_at_the_timeout_naming_the_nodes():
    cluster = FakeCluster([rhcos_node('w1'), bare_node('w2')])
    clock = Clock()
    with pytest.raises(TaskError) as error:
        wait_for_nfd(cluster, params(wait=True, wait_timeout=12), clock, clock.sleep)
    # The last look is at the timeout: 5 + 5 + 2 seconds.
    assert clock.sleeps == [5, 5, 2]
    assert str(error.value) == ('timed out after 12s waiting for NFD labels: 1 of 2 Ready untainted node(s) have no NFD labels; '
                                'Ready untainted nodes without feature.node.kubernetes.io/ labels: w2')
    assert error.value.result['without_nfd'] == ['w2'] and error.value.result['waited_seconds'] == 12


def test_without_wait_one_look_and_no_failure():
    cluster = FakeCluster([bare_node('w2')])
    result = run(FakeModule(params()), cluster)
    assert result['without_nfd'] == ['w2'] and result['waited_seconds'] == 0
    assert cluster.reads == [('nodes', None)]


def test_run_reports_facts_groups_and_warnings():
    cluster = FakeCluster([rhcos_node('w1'), rhcos_node('w2', rhcos=RHCOS_418, label_rhcos=RHCOS_416),
                           rhcos_node('cpu', gpu=False)])
    module = FakeModule(params())
    result = run(module, cluster)
    assert result['changed'] is False and cluster.writes == []
    assert result['gpu_nodes'] == ['w1', 'w2']
    assert result['groups']['by_rhcos'] == {RHCOS_416: ['w1'], RHCOS_418: ['w2']}
    assert result['rhcos_versions'] == [RHCOS_416, RHCOS_418]
    assert list(result['node_warnings']) == ['w2']
    assert module.warnings == result['node_warnings']['w2']
    assert 'diff' not in result


def test_label_maps_are_returned_only_when_asked():
    cluster = FakeCluster([rhcos_node('w1')])
    assert 'labels' not in run(FakeModule(params()), cluster)['nodes'][0]
    labels = run(FakeModule(params(return_labels=True)), cluster)['nodes'][0]['labels']
    assert labels == cluster.nodes['w1']['metadata']['labels']


def test_labels_are_managed_once_and_an_opt_out_made_meanwhile_is_honoured():
    cluster = FakeCluster([rhcos_node('w1'), rhcos_node('w2'), rhcos_node('cpu', gpu=False)])

    def admin_opts_w2_out(name):
        # Between the module's read and its patch, an admin opts w2 out of the driver.
        if name == 'w2' and DRIVER not in cluster.nodes['w2']['metadata']['labels']:
            cluster.set_labels('w2', {DRIVER: 'false'})
    cluster.before_patch = admin_opts_w2_out
    module = FakeModule(params(manage_labels=True), diff=True)
    result = run(module, cluster)
    everything = dict([(PRESENT, 'true')] + [('nvidia.com/gpu.deploy.' + op, 'true') for op in OPERANDS])
    assert result['changed'] is True
    assert result['label_changes']['w1'] == everything
    # w2's first patch met the changed node (409): re-read, re-planned without the driver label.
    assert result['label_changes']['w2'] == dict((k, v) for k, v in everything.items() if k != DRIVER)
    assert cluster.writes == [('PATCH', 'w1'), ('PATCH', 'w2'), ('PATCH', 'w2')]
    assert cluster.nodes['w2']['metadata']['labels'][DRIVER] == 'false'
    assert [d['before_header'] for d in result['diff']] == ['node w1 labels', 'node w2 labels']
    assert dict((n['name'], n['deploy_labels'].get('driver')) for n in result['nodes']) == {
        'cpu': None, 'w1': 'true', 'w2': 'false'}

    cluster.before_patch = None
    again = run(FakeModule(params(manage_labels=True), diff=True), cluster)
    assert (again['changed'], again['label_changes'], again['diff']) == (False, {}, [])
    assert len(cluster.writes) == 3


def test_a_node_that_keeps_changing_fails_naming_it():
    cluster = FakeCluster([rhcos_node('w1')])
    cluster.before_patch = lambda name: cluster.set_labels(name, {'unrelated': str(len(cluster.writes))})
    with pytest.raises(TaskError) as error:
        run(FakeModule(params(manage_labels=True)), cluster)
    assert str(error.value) == 'node w1 changed under every one of 3 label patches (HTTP 409 Conflict); run again'


def test_labels_state_absent_removes_only_what_this_collection_sets():
    cluster = FakeCluster([rhcos_node('w1', extra={PRESENT: 'true', DRIVER: 'true',
                                                   'nvidia.com/gpu.deploy.dcgm-exporter': 'false'})])
    result = run(FakeModule(params(manage_labels=True, labels_state='absent')), cluster)
    assert result['label_changes'] == {'w1': {PRESENT: None, DRIVER: None}}
    assert cluster.nodes['w1']['metadata']['labels']['nvidia.com/gpu.deploy.dcgm-exporter'] == 'false'
