# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module worker's parts: its name, its directory, its framing, the report a result carries, a wrapper run by a
worker process (no cluster). tests/cluster/test_module_worker_playbooks.py runs it through ansible-playbook."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.accelerators.gpu.plugins.module_utils.runner import worker as module_worker
from ansible_collections.accelerators.gpu.plugins.module_utils.runner.worker import NotServed
from ansible_collections.accelerators.gpu.plugins.module_utils.runner import worker_process


def test_a_worker_is_named_by_interpreter_import_path_packages_and_protocol():
    key = module_worker.worker_key('/venv/bin/python', ['/a', '/b'], 'source', ['k8s-37.dist-info'])
    assert key == module_worker.worker_key('/venv/bin/python', ['/a', '/b'], 'source', ['k8s-37.dist-info'])
    assert len({key,
                module_worker.worker_key('/other/bin/python', ['/a', '/b'], 'source', ['k8s-37.dist-info']),
                module_worker.worker_key('/venv/bin/python', ['/a'], 'source', ['k8s-37.dist-info']),
                module_worker.worker_key('/venv/bin/python', ['/b', '/a'], 'source', ['k8s-37.dist-info']),
                module_worker.worker_key('/venv/bin/python', ['/a', '/b'], 'changed source', ['k8s-37.dist-info']),
                module_worker.worker_key('/venv/bin/python', ['/a', '/b'], 'source', ['k8s-33.dist-info'])}) == 6


def test_the_socket_directory_is_private_or_not_used(tmp_path):
    private = str(tmp_path / 'private')
    assert worker_process.private_dir(private) == private
    assert os.stat(private).st_mode & 0o777 == 0o700
    shared = tmp_path / 'shared'
    shared.mkdir(mode=0o755)
    os.chmod(str(shared), 0o755)
    assert worker_process.private_dir(str(shared)) is None
    target = tmp_path / 'target'
    target.mkdir(mode=0o700)
    os.symlink(str(target), str(tmp_path / 'link'))
    assert worker_process.private_dir(str(tmp_path / 'link')) is None


def test_frames_carry_large_payloads_and_file_descriptors(tmp_path):
    left, right = socket.socketpair()
    payload = os.urandom(3 << 20)
    with open(str(tmp_path / 'out'), 'w') as out:
        # More than a socket buffer holds: the sender blocks until the receiver reads.
        sender = threading.Thread(target=worker_process.send_frame, args=(left, payload, (out.fileno(),)))
        sender.start()
        received, fds = worker_process.receive_frame(right, max_fds=2)
        sender.join()
    assert received == payload and len(fds) == 1
    os.write(fds[0], b'through the passed descriptor')
    os.close(fds[0])
    assert (tmp_path / 'out').read_text() == 'through the passed descriptor'
    left.close()
    right.close()


@pytest.fixture
def runtime():
    """A short directory for the worker's socket (an AF_UNIX address, which pytest's tmp_path may not fit in)."""
    directory = tempfile.mkdtemp(prefix='agw-', dir='/tmp')
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def start_worker(environ):
    """A worker for this interpreter with environ's import path, started as a module process would start it; its
    socket path once it listens."""
    base_path = module_worker.interpreter_path(sys.executable, environ)
    path = module_worker._worker_path(environ, sys.executable, base_path, module_worker.worker_source())
    module_worker._start_worker(path, base_path, module_worker.worker_source())
    deadline = time.monotonic() + 60
    while not os.path.exists(path + '.sock') and time.monotonic() < deadline:
        time.sleep(0.1)
    return path


def sockets(runtime):
    return sorted(Path(runtime).glob('accelerators-gpu-*/*.sock'))


def test_the_first_request_starts_a_worker_and_waits_for_it_to_run_the_wrapper_as_its_interpreter_would(
        tmp_path, runtime):
    environ = dict(os.environ, XDG_RUNTIME_DIR=runtime, GREETING='from the task', ACCELERATORS_GPU_WORKER_IDLE='5')
    # More on stderr than a pipe holds: the caller must read while the child writes.
    wrapper = (b"import os, sys\nprint(os.environ['GREETING'], os.getcwd(), __name__, sys.argv[0] == __file__)\n"
               b"sys.stderr.write('x' * 300000)\nraise SystemExit(3)\n")
    for _request in ('first', 'second'):
        rc, stdout, stderr = module_worker.run_wrapper(sys.executable, wrapper, 'test.wrapper', environ,
                                                       str(tmp_path))
        assert (rc, stdout, stderr) == (3, ('from the task %s __main__ True\n' % tmp_path).encode(), b'x' * 300000)
    assert len(sockets(runtime)) == 1
    off = dict(environ, ACCELERATORS_GPU_WORKER='off')
    with pytest.raises(NotServed, match='^ACCELERATORS_GPU_WORKER=off$'):
        module_worker.run_wrapper(sys.executable, wrapper, 'test.wrapper', off, str(tmp_path))


def test_a_worker_that_exits_as_it_starts_or_does_not_listen_in_time_is_a_reason(tmp_path, runtime, monkeypatch):
    directory = module_worker.private_socket_dir(dict(os.environ, XDG_RUNTIME_DIR=runtime))
    failing = tmp_path / 'failing'
    failing.write_text('#!/bin/sh\nexit 3\n')
    silent = tmp_path / 'silent'
    silent.write_text('#!/bin/sh\nexec sleep 2\n')
    for script in (failing, silent):
        script.chmod(0o755)
    with pytest.raises(NotServed, match='^the worker exited as it started, with exit code 3$'):
        module_worker._started(os.path.join(directory, 'failing'), [], '', str(failing), {})
    monkeypatch.setattr(module_worker, 'START_SECONDS', 0.5)
    with pytest.raises(NotServed, match='^the worker did not listen within 0.5 s of its start$'):
        module_worker._started(os.path.join(directory, 'silent'), [], '', str(silent), {})


def test_a_modules_exit_handlers_run_as_it_ends_and_its_temporary_files_are_in_the_callers_tmpdir(tmp_path, runtime):
    module_tmp = tmp_path / 'tmp'
    module_tmp.mkdir()
    environ = dict(os.environ, XDG_RUNTIME_DIR=runtime, TMPDIR=str(module_tmp), ACCELERATORS_GPU_WORKER_IDLE='5')
    # As the Kubernetes client keeps a kubeconfig's certificate or key (a temporary file it deletes at exit) and
    # kubernetes.core its discovery cache (a file in the temporary directory that the next module reads).
    wrapper = (b"import atexit, os, tempfile\n"
               b"handle, name = tempfile.mkstemp()\natexit.register(os.remove, name)\n"
               b"unregistered = tempfile.mkstemp()[1]\natexit.register(os.remove, unregistered)\n"
               b"atexit.unregister(os.remove)\natexit.register(os.remove, name)\n"
               b"open(os.path.join(tempfile.gettempdir(), 'cache.json'), 'w').close()\n"
               b"print(name, unregistered)\nraise SystemExit(0)\n")
    start_worker(dict(os.environ, XDG_RUNTIME_DIR=runtime, ACCELERATORS_GPU_WORKER_IDLE='5'))
    rc, stdout, stderr = module_worker.run_wrapper(sys.executable, wrapper, 'test.wrapper', environ,
                                                   str(tmp_path))
    assert (rc, stderr) == (0, b'')
    name, unregistered = stdout.decode().split()
    assert sorted(path.name for path in module_tmp.iterdir()) == sorted(['cache.json', Path(unregistered).name])
    assert not os.path.exists(name)


def test_a_request_the_worker_cannot_take_is_left_to_the_caller_with_the_reason(tmp_path, runtime):
    environ = dict(os.environ, XDG_RUNTIME_DIR=runtime, ACCELERATORS_GPU_WORKER_IDLE='5')
    wrapper = b"print('served')\nraise SystemExit(0)\n"
    start_worker(environ)
    with pytest.raises(NotServed, match="^the worker could not take the module: FileNotFoundError: .*gone'$"):
        module_worker.run_wrapper(sys.executable, wrapper, 'test.wrapper', environ, str(tmp_path / 'gone'))
    assert module_worker.run_wrapper(sys.executable, wrapper, 'test.wrapper', environ, str(tmp_path)) == (
        0, b'served\n', b'')


def test_a_worker_is_not_used_once_the_packages_on_its_import_path_change(tmp_path, runtime):
    site = tmp_path / 'site'
    (site / 'kubernetes-37.0.2.dist-info').mkdir(parents=True)
    # Idle long enough that the first worker still listens when the second request comes, however slow the machine.
    environ = dict(os.environ, XDG_RUNTIME_DIR=runtime, ACCELERATORS_GPU_WORKER_IDLE='60',
                   PYTHONPATH=os.pathsep.join([str(site)] + [p for p in [os.environ.get('PYTHONPATH')] if p]))
    # The request's child is forked by the worker: its parent is the worker that served it.
    wrapper = b"import os\nprint(os.getppid())\nraise SystemExit(0)\n"
    rc, first_worker, err = module_worker.run_wrapper(sys.executable, wrapper, 'test.wrapper', environ, str(tmp_path))
    assert (rc, err) == (0, b'')
    first = sockets(runtime)
    # pip downgrades the client in the same environment: the worker that preloaded 37 takes no more requests, and
    # one is started for the packages now installed.
    (site / 'kubernetes-37.0.2.dist-info').rename(site / 'kubernetes-33.1.0.dist-info')
    rc, second_worker, err = module_worker.run_wrapper(sys.executable, wrapper, 'test.wrapper', environ, str(tmp_path))
    assert (rc, err) == (0, b'')
    assert first_worker != second_worker
    assert len(first) == 1 and len(sockets(runtime)) == 2 and first[0] in sockets(runtime)


def test_installed_packages_are_the_metadata_directories_on_the_import_path(tmp_path):
    (tmp_path / 'a' / 'kubernetes-37.0.2.dist-info').mkdir(parents=True)
    (tmp_path / 'a' / 'kubernetes').mkdir()
    (tmp_path / 'b' / 'PyYAML-6.0.3.egg-info').mkdir(parents=True)
    assert module_worker.installed_packages([str(tmp_path / 'a'), str(tmp_path / 'missing'), str(tmp_path / 'b')]) == [
        'kubernetes-37.0.2.dist-info', 'PyYAML-6.0.3.egg-info']


REPORT = {'served_by': 'worker', 'handed_by': 'connection'}


@pytest.mark.parametrize('stdout', [
    b'{"changed": false, "ping": "pong"}\n',
    b'{}',
    # What Ansible reads past: lines before the result, and after it.
    b'a line a module printed\n{"changed": true,\n "nested": {"a": [1, 2]}}\n\nanother line\n',
])
def test_the_report_joins_the_modules_result_and_nothing_else_changes(stdout):
    reported, carried = module_worker.with_report(stdout, REPORT)
    assert carried == REPORT
    start, end = stdout.index(b'{'), stdout.rindex(b'}') + 1
    result = json.loads(reported[start:len(reported) - (len(stdout) - end)])
    assert result == dict(json.loads(stdout[start:end]), accelerators_gpu_worker=REPORT)
    assert reported[:start] == stdout[:start] and reported[len(reported) - (len(stdout) - end):] == stdout[end:]


def test_a_result_that_carries_a_report_keeps_it_and_output_without_a_result_stays_as_it_is():
    forwarded = {'served_by': 'worker', 'handed_by': 'module'}
    stdout = json.dumps({'changed': False, 'accelerators_gpu_worker': forwarded}).encode()
    assert module_worker.with_report(stdout, REPORT) == (stdout, forwarded)
    for output in (b'', b'Traceback (most recent call last):\n  ...\n', b'[1, 2]', b'{"unterminated": \n}'):
        assert module_worker.with_report(output, REPORT) == (output, None)
