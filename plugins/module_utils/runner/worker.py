# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A per-user worker process that runs this collection's modules with the Kubernetes client already imported.

Importing the kubernetes client costs a module process most of its run (0.5-0.8 s of CPU, against tens of
milliseconds for the requests of a no-op), and a deploy runs a dozen modules. kubernetes.core solved the same
problem with cloud.common's turbo mode; this is the same idea, kept small:

- The module process (the stub) connects to a Unix socket in a directory only its user can open, and hands
  over its module arguments, environment, working directory, the path of its AnsiballZ payload and its own
  stdout and stderr (as file descriptors).
- The worker forks a child per request. The child takes the stub's environment and working directory, imports
  the module and its module_utils from the stub's payload (never from an earlier request, so a changed
  collection is always the code that runs), and runs it exactly as AnsiballZ does, writing its result straight to
  the stub's stdout; it sends back only the exit code. The worker itself holds nothing but third-party imports.
- On this host (connection local, no become, not async), the action plugin of these modules
  (plugins/plugin_utils/worker_action.py) goes further: it hands the worker the AnsiballZ wrapper Ansible would pipe into
  a new interpreter (run_wrapper), and the child runs it as that interpreter would. No module process starts at all:
  that saves a Python start and the import of ansible.module_utils from the payload, about 0.25 s a task.
- The connection plugin accelerators.gpu.local, which the playbooks use, does the same for any module piped into an
  interpreter: kubernetes.core's k8s and k8s_info too, which import the Kubernetes client anew in each process.
- When no worker answers, the module runs in its own process as usual and one is started for the modules that
  follow; a worker idle for ACCELERATORS_GPU_WORKER_IDLE seconds (default 120) exits.
  ACCELERATORS_GPU_WORKER=off turns it off. ACCELERATORS_GPU_WORKER_LOG names a file that gets a line per request
  served, from=module (a module process forwarded it), from=action (the action plugin handed it the wrapper) or
  from=connection (the connection plugin did), with its wall seconds and the peak resident memory of the process
  that ran it, for tests, benchmarks and debugging.

Only the standard library is used here: the worker starts from this file's source, before any payload exists.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import atexit
import base64
import errno
import fcntl
import gc
import hashlib
import inspect
import json
import marshal
import os
import resource
import runpy
import selectors
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
import zipimport

SWITCH = 'ACCELERATORS_GPU_WORKER'
IDLE = 'ACCELERATORS_GPU_WORKER_IDLE'
LOG = 'ACCELERATORS_GPU_WORKER_LOG'
DEFAULT_IDLE_SECONDS = 120
# What the worker imports once for every module it runs: the Kubernetes client and what it pulls in, and Jinja2, with
# which driver_daemonsets renders the driver role's template (0.08 s to import).
PRELOAD = ('kubernetes', 'kubernetes.dynamic', 'urllib3', 'yaml', 'jsonpatch', 'jinja2')
_LENGTH = struct.Struct('!Q')
# Longest socket path without its suffix ('.sock' and, while it is bound, '.<pid>'): AF_UNIX addresses hold 107
# bytes on Linux, 103 on BSDs.
_MAX_PATH = 88


def _socket_dir(environ):
    return os.path.join(environ.get('XDG_RUNTIME_DIR') or '/tmp', 'accelerators-gpu-%d' % os.getuid())


def switched_off(environ):
    return environ.get(SWITCH, '').lower() in ('off', 'false', 'no', '0')


def private_socket_dir(environ):
    """The directory of this user's workers, created if missing; None when it is not private to this user."""
    return _private_dir(_socket_dir(environ))


def _private_dir(path):
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


def worker_key(executable, base_path, source, packages=()):
    """The worker's name: one per interpreter, import path, installed packages (installed_packages) and version of
    this file, whose protocol it speaks. A worker is never used after the packages it preloaded have changed."""
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


def _send_frame(conn, data, fds=()):
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


def _receive_frame(conn, max_fds=0):
    fds = []
    if max_fds:
        header, fds, _flags, _address = socket.recv_fds(conn, _LENGTH.size, max_fds)
        if len(header) < _LENGTH.size:
            header += _receive_exactly(conn, _LENGTH.size - len(header))
    else:
        header = _receive_exactly(conn, _LENGTH.size)
    return _receive_exactly(conn, _LENGTH.unpack(header)[0]), fds


def _own_source():
    loader = globals().get('__loader__')
    source = loader.get_source(__name__) if loader is not None and hasattr(loader, 'get_source') else None
    if source is None:
        with open(__file__) as handle:
            source = handle.read()
    # Ansible's collection loader on the controller gives bytes.
    return source.decode('utf-8') if isinstance(source, bytes) else source


def forward():
    """Have the worker run this module process's module; exits with the module's exit code when it did.

    Returns (and the caller runs the module itself) when the worker is off, when this process is not an AnsiballZ
    module run, and when no worker takes the request, in which case one is started for the modules that follow.
    """
    if switched_off(os.environ):
        return
    main = sys.modules.get('__main__')
    payload = getattr(main, '_modlib_path', None)
    module_fqn = getattr(main, '_module_fqn', None)
    basic = sys.modules.get('ansible.module_utils.basic')
    params = getattr(basic, '_ANSIBLE_ARGS', None)
    if not (payload and module_fqn and params is not None and hasattr(socket, 'send_fds')) or not _runner():
        return
    base_path = [entry for entry in sys.path if not entry.startswith(payload)]
    source = _own_source()
    path = _worker_path(os.environ, sys.executable, base_path, source)
    if path is None:
        return
    request = json.dumps({
        'payload': payload, 'module_fqn': module_fqn, 'params': base64.b64encode(params).decode('ascii'),
        'profile': getattr(basic, '_ANSIBLE_PROFILE', None), 'env': dict(os.environ), 'cwd': os.getcwd(),
    }).encode('utf-8')
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with conn:
        try:
            conn.connect(path + '.sock')
            sys.stdout.flush()
            sys.stderr.flush()
            _send_frame(conn, request, (sys.stdout.fileno(), sys.stderr.fileno()))
            _receive_frame(conn)  # taken: from here on the module runs there
        except (OSError, EOFError):
            _start_worker(path, base_path, source)
            return
        try:
            rc = json.loads(_receive_frame(conn)[0])['rc']
        except (OSError, EOFError, ValueError, KeyError):
            sys.stdout.write(json.dumps({'failed': True, 'msg': _ended_early(module_fqn)}) + '\n')
            rc = 1
    # As a module ends: AnsiballZ's wrapper still removes the payload.
    raise SystemExit(rc)


def _ended_early(module_fqn):
    return ('the accelerators.gpu module worker ended before the module %s did; %s=off runs modules in their own '
            'process' % (module_fqn, SWITCH))


def _worker_path(environ, executable, base_path, source):
    """Where the worker for this interpreter, import path and protocol listens (without '.sock'); None when there
    is no private directory for it or the path is too long to bind."""
    directory = private_socket_dir(environ)
    if directory is None:
        return None
    path = os.path.join(directory, worker_key(executable, base_path, source, installed_packages(base_path)))
    return path if len(path) <= _MAX_PATH else None


def interpreter_path(executable, environ):
    """The import path a module process of executable started with environ has, as forward() sees it there: the
    interpreter's own path, without the script's directory the AnsiballZ wrapper removes."""
    output = subprocess.run([executable, '-c', 'import json, sys; print(json.dumps(sys.path))'], env=environ,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True)
    return [entry for entry in json.loads(output.stdout) if entry not in ('', '.')]


def run_wrapper(executable, wrapper, module_fqn, environ, cwd, handed_by='action'):
    """On the controller, for a module Ansible would pipe into executable as an AnsiballZ wrapper: have the worker
    of that interpreter run the wrapper, with environ and cwd. (rc, stdout bytes, stderr bytes), as the process would
    have ended; None when the worker is off or none is running (the caller then runs the module as usual, and one is
    started for the modules that follow). handed_by (action, connection) is what the log's from= says."""
    if switched_off(environ) or not hasattr(socket, 'send_fds'):
        return None
    try:
        base_path = interpreter_path(executable, environ)
    except (OSError, ValueError, subprocess.CalledProcessError):
        return None
    path = _worker_path(environ, executable, base_path, _own_source())
    if path is None:
        return None
    request = json.dumps({'wrapper': base64.b64encode(wrapper).decode('ascii'), 'module_fqn': module_fqn,
                          'env': dict(environ), 'cwd': cwd, 'from': handed_by}).encode('utf-8')
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    writers = [out_write, err_write]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            try:
                conn.connect(path + '.sock')
            except OSError:
                _start_worker(path, base_path, _own_source(), executable, environ)
                return None
            try:
                _send_frame(conn, request, writers)
                _receive_frame(conn)  # taken: from here on the module runs there
            except (OSError, EOFError):
                return None
            # Only the child holds the writing ends now: its exit ends both streams.
            for fd in writers:
                os.close(fd)
            writers = []
            stdout, stderr = _drain(out_read, err_read)
            try:
                rc = json.loads(_receive_frame(conn)[0])['rc']
            except (OSError, EOFError, ValueError, KeyError):
                stderr += (_ended_early(module_fqn) + '\n').encode('utf-8')
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
    process's output (Ansible waits for it), with what it needs of environ (this process's by default)."""
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
               if name in ('PATH', 'HOME', 'LANG', 'LC_ALL', 'TMPDIR', LOG))
    env[SWITCH] = 'off'
    try:
        subprocess.Popen([executable or sys.executable, script, path, idle, json.dumps(base_path)], env=env,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         close_fds=True, start_new_session=True)
    except OSError:
        pass


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
    _cache_compiled_sources(_private_dir(path + '.code'))
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
    """In a child of the worker: run the stub's module as AnsiballZ would, its output on the stub's stdout."""
    started = time.monotonic()
    module_fqn = None
    sender = None
    rc = 1
    taken = False
    exit_handlers = None
    try:
        data, fds = _receive_frame(conn, max_fds=2)
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
        _send_frame(conn, b'{}')
        taken = True
        _exit_with_the_stub(conn)
        (_run_wrapper if 'wrapper' in request else _run_module)(request)
    except SystemExit as exit_:
        rc = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:
        if taken:
            traceback.print_exc()
    finally:
        if exit_handlers:
            _run_exit_handlers(exit_handlers)
        if not taken:
            os._exit(0)  # unanswered: the stub runs the module itself
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        # Logged before the exit code goes: the stub then closes the connection, and the watch thread ends this
        # process at once.
        _log('%s pid=%d worker=%d rc=%s seconds=%.3f from=%s maxrss_mib=%d'
             % (module_fqn, os.getpid(), os.getppid(), rc, time.monotonic() - started, sender,
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024))
        try:
            _send_frame(conn, json.dumps({'rc': rc}).encode('utf-8'))
        except OSError:
            pass
        os._exit(0)


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


def _exit_with_the_stub(conn):
    """Stop this child when the stub goes away (killed by a timeout): it sends nothing more, so EOF means gone."""

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


# The arguments _run_module gives the AnsiballZ loader's run_module (ansible-core 2.19 on).
_LOADER_ARGUMENTS = ('json_params', 'profile', 'module_fqn', 'modlib_path', 'extensions')


def _runner():
    """How _run_module runs a module with this process's ansible.module_utils: the AnsiballZ loader's run_module
    (ansible-core 2.19 on) when it takes _LOADER_ARGUMENTS; else, when there is no such loader (before 2.19, whose
    wrapper sets the arguments and runs the module itself), 'runpy'; None with a loader this file does not know, and
    then the module runs in its own process."""
    try:
        from ansible.module_utils._internal._ansiballz import _loader
    except ImportError:
        return 'runpy'
    try:
        parameters = inspect.signature(_loader.run_module).parameters
    except (AttributeError, TypeError, ValueError):
        return None
    return _loader.run_module if all(name in parameters for name in _LOADER_ARGUMENTS) else None


def _run_module(request):
    sys.path.insert(0, request['payload'])
    params = base64.b64decode(request['params'])
    runner = _runner()
    if runner != 'runpy':
        runner(json_params=params, profile=request['profile'], module_fqn=request['module_fqn'],
               modlib_path=request['payload'], extensions={})
    else:
        from ansible.module_utils import basic
        basic._ANSIBLE_ARGS = params
        runpy.run_module(mod_name=request['module_fqn'], run_name='__main__', alter_sys=True,
                         init_globals=dict(_module_fqn=request['module_fqn'], _modlib_path=request['payload']))
    raise RuntimeError('the module %s did not exit' % request['module_fqn'])


if __name__ == '__main__':
    serve(sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3]))
