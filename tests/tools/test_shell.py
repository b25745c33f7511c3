"""The small sh the simulator plays pods' scripts with (tools/localcluster/shell.py)."""

from localcluster import shell


def run(script, failing=(), arguments=()):
    """(status, output, commands run) of the script; a command named in failing returns 7."""
    ran = []

    def command(sh, argv):
        ran.append(argv)
        return 7 if argv[0] in failing else 0
    sh = shell.Shell(command, arguments)
    return sh.run(script), sh.output, ran


def test_functions_variables_loops_and_redirections():
    script = "\n".join([
        'set -u',
        'smi() { chroot /root tool "$@"; }',
        'gpus="a b"',
        'for gpu in $gpus; do',
        '  echo "doing $gpu"',
        '  smi -x -i "$gpu" >/dev/null 2>&1',
        'done',
        'echo done ${gpus}'])
    status, output, ran = run(script)
    assert status == 0
    assert output == ["doing a", "doing b", "done a b"]
    assert ran == [["chroot", "/root", "tool", "-x", "-i", "a"], ["chroot", "/root", "tool", "-x", "-i", "b"]]


def test_and_or_groups_exit_and_the_exit_trap():
    script = "\n".join([
        'restore() { for x in one two; do step "$x" || echo "not $x"; done; }',
        'trap restore EXIT',
        'fail || { echo "it failed"; exit 4; }',
        'echo never'])
    status, output, ran = run(script, failing=("fail", "step"))
    assert status == 4
    assert output == ["it failed", "not one", "not two"]
    assert ran == [["fail"], ["step", "one"], ["step", "two"]]
    assert run("ok && echo yes; fail && echo no; true", failing=("fail",))[:2] == (0, ["yes"])
    assert run("echo $2 $1", arguments=("x", "y"))[1] == ["y x"]


def test_a_syntax_error_is_status_2():
    status, output, ran = run("for x in a; do echo $x")
    assert status == 2 and output[0].startswith("sh: syntax error") and not ran
