"""A small subset of POSIX sh, to play the scripts of simulated pods (gpu_faults: GPU resets and reboots) without
running anything on this machine.

Understood: commands separated by newlines, `;`, `&&`, `||` and `|` (a pipeline's status is its last command's);
`{ ...; }` groups; one-line and multi-line `for NAME in WORDS; do ...; done`; functions `NAME() { ...; }` with "$@" and
$1...; assignments `NAME=value`; $NAME, ${NAME}, $1... and $? expansion (an expanded unquoted word is split at blanks);
redirections (dropped: output goes to the pod's termination message); and the builtins echo, exit, return, set,
trap ... EXIT, true, false and `:`. Every other command goes to the caller's run_command(shell, argv) -> status.
Not understood (and taken as words): command substitution, arithmetic, if/case/while, here-documents.
"""

import re
import shlex

_SEPARATORS = (";", "&&", "||", "|", "&")
_REDIRECTIONS = (">", ">>", "<", ">&", "<&", ">|")
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*|[@*?0-9])\}|([A-Za-z_][A-Za-z0-9_]*|[@*?0-9]))")


class ShellExit(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.code = code


class _Return(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.code = code


def tokens(script):
    """The script's words and operators, a `;` for each line's end."""
    found = []
    for line in script.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        found.extend(list(lexer) + [";"])
    return found


def parse(words):
    """The command list of the words (tokens()), as nested tuples."""
    commands, position = _list(words, 0, ())
    if position != len(words):
        raise ValueError("unexpected %r" % words[position])
    return commands


def _list(words, position, stops):
    commands = []
    while position < len(words):
        if words[position] in _SEPARATORS:
            position += 1
            continue
        if words[position] in stops:
            break
        command, position = _and_or(words, position, stops)
        commands.append(command)
    return commands, position


def _and_or(words, position, stops):
    first, position = _command(words, position, stops)
    rest = []
    while position < len(words) and words[position] in ("&&", "||", "|"):
        operator = words[position]
        command, position = _command(words, position + 1, stops)
        rest.append((operator, command))
    return ("and_or", first, rest), position


def _expect(words, position, word):
    if position >= len(words) or words[position] != word:
        raise ValueError("expected %r" % word)
    return position + 1


def _command(words, position, stops):
    while position < len(words) and words[position] == ";":
        position += 1
    if position >= len(words):
        raise ValueError("a command is missing")
    word = words[position]
    if word == "{":
        body, position = _list(words, position + 1, ("}",))
        return ("group", body), _expect(words, position, "}")
    if word == "for":
        name, position = words[position + 1], position + 2
        items = []
        if position < len(words) and words[position] == "in":
            position += 1
            while words[position] not in (";", "do"):
                items.append(words[position])
                position += 1
        while words[position] == ";":
            position += 1
        body, position = _list(words, _expect(words, position, "do"), ("done",))
        return ("for", name, items, body), _expect(words, position, "done")
    # shlex gives "()" as one operator, or "(" and ")" when spaced.
    parentheses = 1 if words[position + 1:position + 2] == ["()"] else 2 if words[position + 1:position + 3] == [
        "(", ")"] else 0
    if parentheses:
        position += 1 + parentheses
        while words[position] == ";":
            position += 1
        body, position = _command(words, position, stops)
        return ("function", word, body), position
    simple = []
    # A reserved word (}, done) ends a command only where a command starts: here it is an argument.
    while position < len(words) and words[position] not in _SEPARATORS:
        if words[position] in _REDIRECTIONS:
            position += 2  # the operator and its target
            if simple and simple[-1].isdigit():
                simple.pop()  # the descriptor of 2>/dev/null
            continue
        simple.append(words[position])
        position += 1
    return ("simple", simple), position


class Shell:
    """Runs a script; output collects what it prints (a line per echo, and what run_command adds)."""

    def __init__(self, run_command, arguments=()):
        self.run_command = run_command
        self.variables = {}
        self.functions = {}
        self.positional = [list(arguments)]
        self.on_exit = None
        self.output = []

    def run(self, script):
        """The script's exit status."""
        try:
            commands = parse(tokens(script))
        except ValueError as error:
            self.output.append("sh: syntax error: %s" % error)
            return 2
        status = self._guarded(commands)
        if self.on_exit:
            handler, self.on_exit = self.on_exit, None
            self._guarded(parse(tokens(handler)))
        return status

    def _guarded(self, commands):
        try:
            return self._list(commands)
        except ShellExit as done:
            return done.code

    def _list(self, commands):
        status = 0
        for command in commands:
            status = self._execute(command)
        return status

    def _execute(self, node):
        kind = node[0]
        if kind == "and_or":
            status = self._execute(node[1])
            for operator, command in node[2]:
                if operator == "|" or (operator == "&&") == (status == 0):
                    status = self._execute(command)
            self.variables["?"] = str(status)
            return status
        if kind == "group":
            return self._list(node[1])
        if kind == "for":
            status = 0
            for item in self._expand(node[2]) if node[2] else self.positional[-1]:
                self.variables[node[1]] = item
                status = self._list(node[3])
            return status
        if kind == "function":
            self.functions[node[1]] = node[2]
            return 0
        return self._simple(node[1])

    def _expand(self, words):
        expanded = []
        for word in words:
            if "$" not in word:
                expanded.append(word)
            elif word in ("$@", "${@}", "$*", "${*}"):
                expanded.extend(self.positional[-1])
            else:
                expanded.extend(_VARIABLE.sub(lambda match: self._value(match.group(1) or match.group(2)),
                                              word).split())
        return expanded

    def _value(self, name):
        if name.isdigit():
            arguments = self.positional[-1]
            return arguments[int(name) - 1] if 0 < int(name) <= len(arguments) else ""
        return self.variables.get(name, "")

    def _simple(self, words):
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            name, value = words[0].split("=", 1)
            self.variables[name] = " ".join(self._expand([value])) if value else ""
            words = words[1:]
        argv = self._expand(words)
        if not argv:
            return 0
        name = argv[0]
        if name in self.functions:
            self.positional.append(argv[1:])
            try:
                return self._execute(self.functions[name])
            except _Return as returned:
                return returned.code
            finally:
                self.positional.pop()
        if name == "echo":
            self.output.append(" ".join(argument for argument in argv[1:] if argument != "-n"))
            return 0
        if name in ("exit", "return"):
            code = int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else int(self.variables.get("?", "0"))
            raise ShellExit(code) if name == "exit" else _Return(code)
        if name == "trap":
            if len(argv) > 2 and argv[-1] in ("EXIT", "0"):
                self.on_exit = " ".join(argv[1:-1])
            return 0
        if name in ("set", "true", ":"):
            return 0
        if name == "false":
            return 1
        return self.run_command(self, argv)
