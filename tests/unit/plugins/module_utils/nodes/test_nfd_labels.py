# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.errors import TaskError
from ansible_collections.accelerators.gpu.plugins.module_utils.k8s.views import NODE_FULL, NODE_INFO
from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.facts import OPERANDS, node_facts
from ansible_collections.accelerators.gpu.plugins.module_utils.nodes.nfd_labels import (
    missing_nfd, read_nodes, read_one_by_one, run, wait_for_nfd)
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.fakes import FakeCluster, FakeModule
from ansible_collections.accelerators.gpu.tests.unit.plugins.module_utils.node_dicts import (
    KERNEL_416, RHCOS_416, RHCOS_418, layered_rhcos_node, make_node, rhcos_node, ubuntu_node)

DRIVER = 'nvidia.com/gpu.deploy.driver'
GPU = 'nvidia.com/gpu'
PRESENT = 'nvidia.com/gpu.present'


def params(**overrides):
    base = {'label_selector': None, 'page_size': 500, 'wait': False, 'wait_timeout': 300, 'wait_sleep': 5,
            'min_gpu_nodes': 0, 'manage_labels': False, 'labels_state': 'present', 'operands': None,
            'return_labels': False, 'dra_node_selector': {}}
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
    # One look: the Node Table, then the node without NFD labels in full (its taints, its allocatable resources).
    assert cluster.reads == [('nodes', None, NODE_INFO), ('nodes', None, NODE_FULL)]


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
    # A node in device-plugin mode (no DRA selector): every operand's label but the DRA kubelet plugin's.
    everything = dict([(PRESENT, 'true')] + [('nvidia.com/gpu.deploy.' + op, 'true') for op in OPERANDS
                                             if op != 'dra-driver'])
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


GPU_TAINT = {'key': 'nvidia.com/gpu', 'effect': 'NoSchedule'}


def tainted(node, taint=None):
    return dict(node, spec={'taints': [taint or GPU_TAINT]})


def test_a_third_of_the_selected_nodes_or_fewer_are_read_one_by_one():
    assert (read_one_by_one(0, 0), read_one_by_one(1, 3), read_one_by_one(2, 6)) == (True, True, True)
    assert (read_one_by_one(1, 1), read_one_by_one(1, 2), read_one_by_one(3, 8)) == (False, False, False)


def test_only_the_nodes_without_nfd_labels_are_read_in_full():
    labelled = [rhcos_node('w%d' % index, extra={'pool': 'gpu'}) for index in range(4)]
    bare = [make_node(name, {'pool': 'gpu'}) for name in ('bare-a', 'bare-b', 'bare-c')]
    few = FakeCluster(labelled + bare[:2] + [rhcos_node('elsewhere')])
    facts, versions = read_nodes(few, 'pool=gpu')
    assert few.reads == [('nodes', 'pool=gpu', NODE_INFO), ('node', 'bare-a'), ('node', 'bare-b')]
    assert len(facts) == 6 and versions == dict((name, node['metadata']['resourceVersion'])
                                                for name, node in few.nodes.items() if name != 'elsewhere')
    # Three of seven: one list of the full selected nodes, of which the module keeps the three.
    many = FakeCluster(labelled + bare)
    assert len(read_nodes(many, 'pool=gpu', page_size=7)[0]) == 7
    assert many.reads == [('nodes', 'pool=gpu', NODE_INFO), ('nodes', 'pool=gpu', NODE_FULL)]
    everyone = FakeCluster(labelled)
    read_nodes(everyone)
    assert everyone.reads == [('nodes', None, NODE_INFO)]


def test_facts_of_the_node_table_are_those_of_the_full_node_but_the_taints_of_nfd_labelled_nodes():
    nodes = [
        rhcos_node('rhcos'), tainted(rhcos_node('rhcos-tainted')), rhcos_node('stale', rhcos=RHCOS_418, label_rhcos=RHCOS_416),
        rhcos_node('cpu', gpu=False), layered_rhcos_node('layered'), ubuntu_node('ubuntu', kernel='6.8.0-1011-realtime+rt'),
        rhcos_node('old-nfd', extra={'node.alpha.kubernetes-incubator.io/nfd-pci-10de.present': 'true'}),
        make_node('not-ready', rhcos_node('x')['metadata']['labels'], 'Red Hat Enterprise Linux CoreOS %s (Plow)' % RHCOS_416,
                  KERNEL_416, ready=False),
        # Without NFD labels: read in full, every fact kept, the GPU evidence of allocatable and the taints among them.
        make_node('bare-gpu', {}, 'Ubuntu 22.04.4 LTS', '5.15.0-100-generic', allocatable={GPU: '8'}),
        tainted(bare_node('bare-tainted'), {'key': 'node-role.kubernetes.io/master', 'effect': 'NoSchedule'}),
    ]
    facts = dict((item['name'], item) for item in read_nodes(FakeCluster(nodes))[0])
    for node in nodes:
        name = node['metadata']['name']
        full = node_facts(node)
        assert facts[name]['tainted'] is (None if full['nfd_labelled'] else full['tainted']), name
        assert dict(facts[name], tainted=full['tainted']) == full, name
    assert node_facts(nodes[1])['tainted'] and facts['bare-tainted']['tainted']
    assert facts['bare-gpu']['warnings'][0].startswith('node bare-gpu: looks like a GPU node (allocatable nvidia.com/gpu=8)')


def test_a_server_answering_full_nodes_for_the_table_gives_the_same_facts():
    class FullNodesOnly(FakeCluster):
        def list_nodes(self, label_selector=None, page_size=None, view=NODE_FULL):
            return super(FullNodesOnly, self).list_nodes(label_selector, page_size)

    nodes = [tainted(rhcos_node('w1')), tainted(bare_node('w2'), {'key': 'x', 'effect': 'NoExecute'})]
    assert read_nodes(FullNodesOnly(nodes)) == read_nodes(FakeCluster(nodes))


def test_a_node_deleted_between_the_two_reads_is_left_out():
    class Deleting(FakeCluster):
        def list_nodes(self, label_selector=None, page_size=None, view=NODE_FULL):
            listed = super(Deleting, self).list_nodes(label_selector, page_size, view)
            self.nodes.pop('gone', None)
            return listed

    by_get = Deleting([rhcos_node('w%d' % index) for index in range(3)] + [bare_node('gone')])
    assert [item['name'] for item in read_nodes(by_get)[0]] == ['w0', 'w1', 'w2']
    assert by_get.reads[-1] == ('node', 'gone')
    in_list = Deleting([rhcos_node('w1'), bare_node('gone'), bare_node('stays')])
    facts, versions = read_nodes(in_list)
    assert [item['name'] for item in facts] == sorted(versions) == ['stays', 'w1']


def test_a_node_nfd_labelled_counts_for_the_wait_whatever_its_taints():
    gpu_tainted = FakeCluster([tainted(rhcos_node('w1')), tainted(rhcos_node('w2'))])
    facts = read_nodes(gpu_tainted)[0]
    assert [item['tainted'] for item in facts] == [None, None]
    # nfd-worker tolerating the GPU taint labelled them: nothing is left to wait for.
    assert missing_nfd(facts) is None
    with_bare = read_nodes(FakeCluster([tainted(rhcos_node('w1')), bare_node('w2')]))[0]
    assert missing_nfd(with_bare).startswith('1 of 2 Ready untainted node(s) have no NFD labels')


def test_labelled_nodes_patched_or_read_again_keep_their_taints_unread():
    cluster = FakeCluster([tainted(rhcos_node('w1')), tainted(rhcos_node('w2'))])
    cluster.before_patch = lambda name: cluster.set_labels(name, {'unrelated': 'x'}) if name == 'w2' and len(
        cluster.writes) == 1 else None
    result = run(FakeModule(params(manage_labels=True)), cluster)
    assert sorted(result['label_changes']) == ['w1', 'w2'] and ('node', 'w2') in cluster.reads
    assert [item['tainted'] for item in result['nodes']] == [None, None]
