# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A per-user worker process that runs modules with the Kubernetes client already imported, and how a module gets
there.

Importing the kubernetes client costs a module process most of its run (0.5-0.8 s of CPU, against tens of
milliseconds for the requests of a no-op), and a deploy runs a dozen modules. kubernetes.core solved the same
problem with cloud.common's turbo mode; this is the same idea, kept small:

- The worker (runner/worker_process.py) listens on a Unix socket in a directory only its user can open and forks a
  child per request. The child takes the caller's environment, working directory and output streams, runs the module
  from the caller's payload or wrapper (never from an earlier request, so a changed collection is always the code
  that runs) and sends back only the exit code. The worker itself holds nothing but third-party imports.
- On this host (connection local, no become, not async), the action plugin of these modules
  (plugins/plugin_utils/worker_action.py) hands the worker the AnsiballZ wrapper Ansible would pipe into a new
  interpreter (run_wrapper), and the child runs it as that interpreter would. No module process starts at all: that
  saves a Python start and the import of ansible.module_utils from the payload, about 0.25 s a task.
- The connection plugin accelerators.gpu.local, which the playbooks use, does the same for any module piped into an
  interpreter: kubernetes.core's k8s and k8s_info too, which import the Kubernetes client anew in each process.
- Elsewhere (become, async, another host) the module process hands its run over itself (forward).
- When no worker answers, one is started and waited for (START_SECONDS at most); a module process does not wait and
  runs its module itself. A worker idle for ACCELERATORS_GPU_WORKER_IDLE seconds (default 120) exits.
  ACCELERATORS_GPU_WORKER=off turns it off. ACCELERATORS_GPU_WORKER_LOG names a file that gets a line per request
  served, from=module, from=action or from=connection (who handed it over), with its wall seconds and the peak
  resident memory of the process that ran it, for tests, benchmarks and debugging.

Every module result says which ran it, under REPORT: {served_by: worker, handed_by: ...} or {served_by: module,
reason: ...}. What the worker relies on in ansible-core beyond its public interface is checked once per ansible-core
version (runner/worker_compatibility.py); when it does not hold, the modules run as Ansible runs them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import hashlib
import json
import os
import selectors
import socket
import subprocess
import sys
import time

from . import worker_compatibility, worker_process

SWITCH = worker_process.SWITCH
IDLE = 'ACCELERATORS_GPU_WORKER_IDLE'
DEFAULT_IDLE_SECONDS = 120
# How long a caller on the controller waits for the worker it started to listen.
START_SECONDS = 30
# The key of a module's result that says what ran the module. Modules return no such key of their own.
REPORT = 'accelerators_gpu_worker'
# Longest socket path without its suffix ('.sock' and, while it is bound, '.<pid>'): AF_UNIX addresses hold 107
# bytes on Linux, 103 on BSDs.
_MAX_PATH = 88


class NotServed(Exception):
    """The worker does not run the module; the message says why. The module then runs as Ansible runs it."""


def served(handed_by):
    """The report of a module the worker ran, handed over by handed_by (action, connection, module)."""
    return {'served_by': 'worker', 'handed_by': handed_by}


def not_served(reason):
    """The report of a module that ran in its own process, for reason."""
    return {'served_by': 'module', 'reason': reason}


def with_report(stdout, report):
    """(stdout with report under REPORT in the module's result, the report the result carries): the result is the
    JSON object Ansible reads from a module's output, from the first line that starts with '{' to the last that ends
    with '}'. A result that has a report keeps it; output with no result is returned as it is, with None."""
    lines = stdout.splitlines(True)
    first = next((index for index, line in enumerate(lines) if line.lstrip().startswith(b'{')), None)
    last = next((index for index in range(len(lines) - 1, -1, -1) if lines[index].rstrip().endswith(b'}')), None)
    if first is None or last is None or last < first:
        return stdout, None
    body = b''.join(lines[first:last + 1])
    try:
        result = json.loads(body)
    except ValueError:
        return stdout, None
    if not isinstance(result, dict):
        return stdout, None
    if REPORT in result:
        return stdout, result[REPORT]
    end = body.rindex(b'}')
    added = (b', ' if result else b'') + json.dumps({REPORT: report})[1:-1].encode('utf-8')
    return b''.join(lines[:first]) + body[:end] + added + body[end:] + b''.join(lines[last + 1:]), report


def _socket_dir(environ):
    return os.path.join(environ.get('XDG_RUNTIME_DIR') or '/tmp', 'accelerators-gpu-%d' % os.getuid())


def switched_off(environ):
    """'ACCELERATORS_GPU_WORKER=off' (as environ says it) when environ turns the worker off, else None."""
    value = environ.get(SWITCH, '')
    return '%s=%s' % (SWITCH, value) if value.lower() in ('off', 'false', 'no', '0') else None


def private_socket_dir(environ):
    """The directory of this user's workers, created if missing; None when it is not private to this user."""
    return worker_process.private_dir(_socket_dir(environ))


def worker_key(executable, base_path, source, packages=()):
    """The worker's name: one per interpreter, import path, installed packages (installed_packages) and version of
    the worker's source, whose protocol it speaks. A worker is never used after the packages it preloaded have
    changed."""
    digest = hashlib.sha256()
    for part in [executable] + list(base_path) + [source] + list(packages):
        digest.update(part.encode('utf-8', 'surrogateescape') + b'\0')
    return digest.hexdigest()[:16]


def installed_packages(base_path):
    """The distributions installed on the import path, by their metadata directories' names (name-version.dist-info):
    pip renames them with every install, upgrade or downgrade. One directory listing per path entry."""
    found = []
    for entry in base_path:
        try:
            names = os.listdir(entry)
        except OSError:
            continue  # a zip file, or gone
        found.extend(sorted(name for name in names if name.endswith(('.dist-info', '.egg-info'))))
    return found


def worker_source():
    """The source the worker runs: runner/worker_process.py."""
    return worker_process.module_source(worker_process.__name__, vars(worker_process))


def forward():
    """Have the worker run this module process's module; exits with the module's exit code when it did, its result
    saying so (REPORT).

    Returns (and the caller runs the module itself) when the worker is off, when this process is not an AnsiballZ
    module run as the worker expects, and when no worker takes the request, in which case one is started for the
    modules that follow.
    """
    if switched_off(os.environ):
        return
    main = sys.modules.get('__main__')
    payload = getattr(main, '_modlib_path', None)
    module_fqn = getattr(main, '_module_fqn', None)
    basic = sys.modules.get('ansible.module_utils.basic')
    params = getattr(basic, '_ANSIBLE_ARGS', None)
    if not (payload and module_fqn and params is not None and hasattr(socket, 'send_fds')) \
            or worker_compatibility.module_side_reason():
        return
    base_path = [entry for entry in sys.path if not entry.startswith(payload)]
    source = worker_source()
    try:
        path = _worker_path(os.environ, sys.executable, base_path, source)
    except NotServed:
        return
    request = json.dumps({
        'payload': payload, 'module_fqn': module_fqn, 'params': base64.b64encode(params).decode('ascii'),
        'profile': getattr(basic, '_ANSIBLE_PROFILE', None), 'env': dict(os.environ), 'cwd': os.getcwd(),
    }).encode('utf-8')
    conn = _connect(path)
    if conn is None:
        try:
            _start_worker(path, base_path, source)
        except NotServed:
            pass  # this module runs itself all the same, and the next one starts a worker again
        return
    sys.stdout.flush()
    sys.stderr.flush()
    with conn:
        try:
            rc, stdout, stderr = _hand_over(conn, request, module_fqn)
        except NotServed:
            return
    for stream, data in ((sys.stdout, with_report(stdout, served('module'))[0]), (sys.stderr, stderr)):
        stream.buffer.write(data)
        stream.flush()
    # As a module ends: AnsiballZ's wrapper still removes the payload.
    raise SystemExit(rc)


def _worker_path(environ, executable, base_path, source):
    """Where the worker for this interpreter, import path and protocol listens (without '.sock'); NotServed when there
    is no private directory for it or the path is too long to bind."""
    directory = private_socket_dir(environ)
    if directory is None:
        raise NotServed('%s is not a directory only this user can open' % _socket_dir(environ))
    path = os.path.join(directory, worker_key(executable, base_path, source, installed_packages(base_path)))
    if len(path) > _MAX_PATH:
        raise NotServed('the worker socket path %s.sock is too long for a Unix socket' % path)
    return path


def interpreter_path(executable, environ):
    """The import path a module process of executable started with environ has, as forward() sees it there: the
    interpreter's own path, without the script's directory the AnsiballZ wrapper removes."""
    output = subprocess.run([executable, '-c', 'import json, sys; print(json.dumps(sys.path))'], env=environ,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True)
    return [entry for entry in json.loads(output.stdout) if entry not in ('', '.')]


def run_wrapper(executable, wrapper, module_fqn, environ, cwd, handed_by='action'):
    """On the controller, for a module Ansible would pipe into executable as an AnsiballZ wrapper: have the worker
    of that interpreter run the wrapper, with environ and cwd. (rc, stdout bytes, stderr bytes), as the process would
    have ended; NotServed, saying why, when the worker does not run it (the caller then runs the module as usual).
    When no worker listens, one is started and waited for. handed_by (action, connection) is what the log's from=
    says."""
    off = switched_off(environ)
    if off:
        raise NotServed(off)
    if not hasattr(socket, 'send_fds'):
        raise NotServed('Python %d.%d cannot pass file descriptors over a socket' % sys.version_info[:2])
    try:
        base_path = interpreter_path(executable, environ)
    except (OSError, ValueError, subprocess.CalledProcessError) as error:
        raise NotServed('the interpreter %s did not say its import path: %s' % (executable, error))
    source = worker_source()
    path = _worker_path(environ, executable, base_path, source)
    request = json.dumps({'wrapper': base64.b64encode(wrapper).decode('ascii'), 'module_fqn': module_fqn,
                          'env': dict(environ), 'cwd': cwd, 'from': handed_by}).encode('utf-8')
    with _started(path, base_path, source, executable, environ) as conn:
        return _hand_over(conn, request, module_fqn)


def _connect(path):
    """A connection to the worker listening at path, or None."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path + '.sock')
    except OSError:
        conn.close()
        return None
    return conn


def _started(path, base_path, source, executable, environ):
    """A connection to the worker at path; when none listens, one started and waited for, START_SECONDS at most."""
    conn = _connect(path)
    if conn is not None:
        return conn
    worker = _start_worker(path, base_path, source, executable, environ)
    deadline = time.monotonic() + START_SECONDS
    while conn is None:
        # A worker that exits at once with 0 found another one starting at the same path: that one is waited for.
        exited = worker.poll()
        if exited:
            raise NotServed('the worker exited as it started, with exit code %d' % exited)
        if time.monotonic() > deadline:
            raise NotServed('the worker did not listen within %g s of its start' % START_SECONDS)
        time.sleep(0.02)
        conn = _connect(path)
    return conn


def _hand_over(conn, request, module_fqn):
    """(rc, stdout bytes, stderr bytes) of the module the worker at conn ran for request; NotServed when it did not
    take the request."""
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    writers = [out_write, err_write]
    try:
        try:
            worker_process.send_frame(conn, request, writers)
            answer = json.loads(worker_process.receive_frame(conn)[0])
        except (OSError, EOFError, ValueError) as error:
            raise NotServed('the worker took no request (%s)' % error)
        if 'declined' in answer:
            raise NotServed('the worker could not take the module: %s' % answer['declined'])
        # Only the child holds the writing ends now: its exit ends both streams.
        for fd in writers:
            os.close(fd)
        writers = []
        stdout, stderr = _drain(out_read, err_read)
        try:
            rc = json.loads(worker_process.receive_frame(conn)[0])['rc']
        except (OSError, EOFError, ValueError, KeyError):
            stderr += ('the accelerators.gpu module worker ended before the module %s did; %s=off runs modules in '
                       'their own process\n' % (module_fqn, SWITCH)).encode('utf-8')
            rc = 1
        return rc, stdout, stderr
    finally:
        for fd in [out_read, err_read] + writers:
            os.close(fd)


def _drain(*fds):
    """Everything written to the reading ends fds until each is closed at its other end, read as it comes (a
    module's output can be larger than a pipe holds)."""
    chunks = dict((fd, []) for fd in fds)
    with selectors.DefaultSelector() as selector:
        for fd in fds:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            for key, _events in selector.select():
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    chunks[key.fd].append(chunk)
                else:
                    selector.unregister(key.fd)
    return [b''.join(chunks[fd]) for fd in fds]


def _start_worker(path, base_path, source, executable=None, environ=None):
    """Start the worker of executable (this interpreter by default) in a session of its own, detached from this
    process's output (Ansible waits for it), with what it needs of environ (this process's by default); its
    process (subprocess.Popen). NotServed when it cannot be started."""
    script = path + '.py'
    if not os.path.exists(script):
        staging = '%s.%d' % (script, os.getpid())
        with open(staging, 'w') as handle:
            handle.write(source)
        os.rename(staging, script)
    environ = os.environ if environ is None else environ
    idle = environ.get(IDLE) or str(DEFAULT_IDLE_SECONDS)
    # Only what finds the interpreter's packages: the worker outlives this process, and credentials stay out of it.
    env = dict((name, value) for name, value in environ.items()
               if name in ('PATH', 'HOME', 'LANG', 'LC_ALL', 'TMPDIR', worker_process.LOG))
    env[SWITCH] = 'off'
    try:
        return subprocess.Popen([executable or sys.executable, script, path, idle, json.dumps(base_path)], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                close_fds=True, start_new_session=True)
    except OSError as error:
        raise NotServed('the worker did not start: %s' % error)
