# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The module worker process, and the framing of what it and its callers say on its socket.

The worker starts from this file's source (plugins/module_utils/runner/worker.py writes it beside the socket and runs
it with the interpreter the modules run with), before any module payload exists: it imports the standard library only.
It preloads the Kubernetes client, listens on a Unix socket in a directory only its user can open, and forks a child
per request. The child takes the caller's environment, working directory and output streams, runs the module as
AnsiballZ or the module's interpreter would, and answers with the exit code. A worker idle for idle_seconds exits.

A request is a frame of JSON with two file descriptors (the caller's stdout and stderr):
- a module process's (forwarded by worker.forward): payload, module_fqn, params, profile, env, cwd;
- the controller's (worker.run_wrapper): wrapper (the AnsiballZ wrapper Ansible would pipe into the
  interpreter), module_fqn, env, cwd and from (action, connection: who handed it over).
The child answers {} when it has taken the request, {"declined": reason} when it cannot (its working directory gone,
say), and once the module has ended {"rc": exit code}.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import atexit
import base64
import errno
import fcntl
import gc
import hashlib
import json
import marshal
import os
import resource
import runpy
import signal
import socket
import stat
import struct
import sys
import tempfile
import threading
import time
import traceback
import types
import zipimport

SWITCH = 'ACCELERATORS_GPU_WORKER'
LOG = 'ACCELERATORS_GPU_WORKER_LOG'
# What the worker imports once for every module it runs: the Kubernetes client and what it pulls in, and Jinja2, with
# which driver_daemonsets renders the driver role's template (0.08 s to import).
PRELOAD = ('kubernetes', 'kubernetes.dynamic', 'urllib3', 'yaml', 'jsonpatch', 'jinja2')
_LENGTH = struct.Struct('!Q')


def private_dir(path):
    """path, created if missing, when it is a directory of this user that no one else can open; else None."""
    try:
        os.mkdir(path, 0o700)
    except OSError as error:
        if error.errno != errno.EEXIST:
            return None
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return path


def module_source(name, namespace):
    """The source of the module called name, whose globals are namespace: from its loader (a module payload is a zip
    file), else from its file."""
    loader = namespace.get('__loader__')
    source = loader.get_source(name) if loader is not None and hasattr(loader, 'get_source') else None
    if source is None:
        with open(namespace['__file__']) as handle:
            source = handle.read()
    # Ansible's collection loader on the controller gives bytes.
    return source.decode('utf-8') if isinstance(source, bytes) else source


def send_frame(conn, data, fds=()):
    header = _LENGTH.pack(len(data))
    if fds:
        socket.send_fds(conn, [header], list(fds))
    else:
        conn.sendall(header)
    conn.sendall(data)


def _receive_exactly(conn, size):
    chunks = []
    while size:
        chunk = conn.recv(min(size, 1 << 20))
        if not chunk:
            raise EOFError('connection closed')
        chunks.append(chunk)
        size -= len(chunk)
    return b''.join(chunks)


def receive_frame(conn, max_fds=0):
    fds = []
    if max_fds:
        header, fds, _flags, _address = socket.recv_fds(conn, _LENGTH.size, max_fds)
        if len(header) < _LENGTH.size:
            header += _receive_exactly(conn, _LENGTH.size - len(header))
    else:
        header = _receive_exactly(conn, _LENGTH.size)
    return _receive_exactly(conn, _LENGTH.unpack(header)[0]), fds


def _log(line):
    target = os.environ.get(LOG)
    if target:
        with open(target, 'a') as handle:
            handle.write(line + '\n')


def serve(path, idle_seconds, base_path):
    """The worker: preload, listen at path.sock, fork a child per request; exit after idle_seconds without one."""
    sys.path[:] = base_path
    lock = open(path + '.lock', 'w')
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another worker serves this path, or is starting to
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    address = path + '.sock'
    if os.path.exists(address):
        os.unlink(address)  # left by a worker that died: the lock says none is alive
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound and listening before it has its name: a socket that exists is one that takes connections.
    staging = '%s.%d' % (address, os.getpid())
    listener.bind(staging)
    listener.listen(16)
    os.rename(staging, address)
    listener.settimeout(idle_seconds)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    _cache_compiled_sources(private_dir(path + '.code'))
    # What the worker loaded stays out of its children's garbage collections: a full collection in a child would
    # otherwise walk, and so copy, every page of the preloaded client the child shares with the worker.
    gc.collect()
    gc.freeze()
    try:
        while True:
            try:
                conn, _address = listener.accept()
            except socket.timeout:
                return
            if _peer_uid(conn) not in (None, os.getuid()) or os.fork():
                conn.close()
                continue
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _run_request(conn)
    finally:
        try:
            os.unlink(address)
        except OSError:
            pass  # its directory went first
        lock.close()


def _cache_compiled_sources(directory):
    """Keep the code zipimport compiles from a payload's sources (it has no bytecode), by the source's digest.

    A request's modules are compiled again in each request otherwise, which costs as much as the module's own work.
    zipimport._compile_source is CPython's own (3.8 on); without it the sources are compiled each time, as before.
    """
    compile_source = getattr(zipimport, '_compile_source', None)
    if directory is None or compile_source is None:
        return

    def cached(pathname, source):
        stored = os.path.join(directory, hashlib.sha256(source).hexdigest())
        try:
            with open(stored, 'rb') as handle:
                return _with_filename(marshal.load(handle), pathname)
        except (OSError, EOFError, ValueError, TypeError):
            pass
        code = compile_source(pathname, source)
        staging = '%s.%d' % (stored, os.getpid())
        with open(staging, 'wb') as handle:
            marshal.dump(code, handle)
        os.rename(staging, stored)
        return code

    zipimport._compile_source = cached


def _with_filename(code, filename):
    """code, and the code objects it holds, naming filename (this request's payload) in tracebacks."""
    consts = tuple(_with_filename(const, filename) if isinstance(const, types.CodeType) else const
                   for const in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _peer_uid(conn):
    if not hasattr(socket, 'SO_PEERCRED'):
        return None  # the directory's mode keeps others out
    return struct.unpack('3i', conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize('3i')))[1]


def _run_request(conn):
    """In a child of the worker: run the caller's module as AnsiballZ would, its output on the caller's stdout."""
    started = time.monotonic()
    module_fqn = None
    sender = None
    rc = 1
    taken = False
    exit_handlers = None
    try:
        data, fds = receive_frame(conn, max_fds=2)
        request = json.loads(data)
        module_fqn = request['module_fqn']
        sender = request.get('from', 'action') if 'wrapper' in request else 'module'
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in fds:
            os.close(fd)
        os.environ.clear()
        os.environ.update(request['env'])
        os.environ[SWITCH] = 'off'  # this process runs the module itself
        os.chdir(request['cwd'])
        kube_config = sys.modules.get('kubernetes.config.kube_config')
        if kube_config is not None:
            # Read from the environment at import, which was the worker's, not this request's.
            kube_config.KUBE_CONFIG_DEFAULT_LOCATION = os.environ.get('KUBECONFIG', '~/.kube/config')
        tempfile.tempdir = None  # found again from this request's TMPDIR, not the worker's
        exit_handlers = _recorded_exit_handlers()
        send_frame(conn, b'{}')
        taken = True
        _exit_with_the_caller(conn)
        (_run_wrapper if 'wrapper' in request else _run_module)(request)
    except SystemExit as exit_:
        rc = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException as error:  # pylint: disable=broad-except
        if taken:
            traceback.print_exc()
        else:
            _decline(conn, error)
    finally:
        if exit_handlers:
            _run_exit_handlers(exit_handlers)
        if not taken:
            os._exit(0)  # declined: the caller runs the module itself
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        # Logged before the exit code goes: the caller then closes the connection, and the watch thread ends this
        # process at once.
        _log('%s pid=%d worker=%d rc=%s seconds=%.3f from=%s maxrss_mib=%d'
             % (module_fqn, os.getpid(), os.getppid(), rc, time.monotonic() - started, sender,
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024))
        try:
            send_frame(conn, json.dumps({'rc': rc}).encode('utf-8'))
        except OSError:
            pass
        os._exit(0)


def _decline(conn, error):
    """Tell the caller why this child does not take its request (it then runs the module itself)."""
    try:
        send_frame(conn, json.dumps({'declined': '%s: %s' % (type(error).__name__, error)}).encode('utf-8'))
    except OSError:
        pass


def _recorded_exit_handlers():
    """The exit handlers the module registers (atexit.register, as the Kubernetes client registers the removal of the
    files it writes a kubeconfig's certificates and keys to), kept in a list for _run_exit_handlers: the child ends
    with os._exit, as a forked child must, and that runs none. Registered with atexit too, as before."""
    handlers = []
    register, unregister = atexit.register, atexit.unregister

    def recording_register(func, *args, **kwargs):
        handlers.append((func, args, kwargs))
        return register(func, *args, **kwargs)

    def recording_unregister(func):
        handlers[:] = [handler for handler in handlers if handler[0] != func]
        return unregister(func)

    atexit.register, atexit.unregister = recording_register, recording_unregister
    return handlers


def _run_exit_handlers(handlers):
    """As the interpreter runs them at exit: last registered first, an error in one not stopping the others."""
    for func, args, kwargs in reversed(handlers):
        try:
            func(*args, **kwargs)
        except Exception:  # pylint: disable=broad-except
            traceback.print_exc()


def _exit_with_the_caller(conn):
    """Stop this child when the caller goes away (killed by a timeout): it sends nothing more, so EOF means gone."""

    def watch():
        try:
            while conn.recv(1):
                pass
        except OSError:
            pass
        os._exit(1)

    thread = threading.Thread(target=watch)
    thread.daemon = True
    thread.start()


def _run_wrapper(request):
    """Run an AnsiballZ wrapper as the interpreter Ansible pipes it into would: as __main__, from a file of its
    own (the wrapper leaves its directory out of the import path), with no command-line arguments."""
    handle, script = tempfile.mkstemp(prefix='AnsiballZ_', suffix='.py')
    try:
        with os.fdopen(handle, 'wb') as writer:
            writer.write(base64.b64decode(request['wrapper']))
        sys.argv = [script]
        runpy.run_path(script, run_name='__main__')
    finally:
        os.unlink(script)
    raise RuntimeError('the module %s did not exit' % request['module_fqn'])


def _run_module(request):
    """Run a module process's module with that process's payload as AnsiballZ does: through the AnsiballZ loader's
    run_module (ansible-core 2.19 on), or as the wrapper of ansible-core before 2.19 does, with runpy. The module
    process checked that this ansible-core offers them as expected (runner/worker_compatibility.py)."""
    sys.path.insert(0, request['payload'])
    params = base64.b64decode(request['params'])
    try:
        from ansible.module_utils._internal._ansiballz import _loader
    except ImportError:
        from ansible.module_utils import basic
        basic._ANSIBLE_ARGS = params
        runpy.run_module(mod_name=request['module_fqn'], run_name='__main__', alter_sys=True,
                         init_globals=dict(_module_fqn=request['module_fqn'], _modlib_path=request['payload']))
    else:
        _loader.run_module(json_params=params, profile=request['profile'], module_fqn=request['module_fqn'],
                           modlib_path=request['payload'], extensions={})
    raise RuntimeError('the module %s did not exit' % request['module_fqn'])


if __name__ == '__main__':
    serve(sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3]))
