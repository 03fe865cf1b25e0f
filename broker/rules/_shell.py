"""Parse a POSIX shell command line into the simple commands it would run (:func:`parse_command`).

A permission rule such as ``command = "git status"`` allows a Bash command only when the command,
*parsed*, consists solely of simple commands that each begin with the rule's words. Matching the
text would let ``git status; rm -rf ~`` through; this module splits the text the way a shell would
(quotes, escapes, operators, substitutions) and reports one :class:`CommandPart` per simple command.

The contract is fail closed:

* Anything whose effect cannot be known from the text alone — a substitution, a parameter
  expansion, a redirection to a file, a leading assignment, ``bash -c``, ``eval``, compound shell
  syntax, a glob in the program name — marks its part *opaque*; an opaque part never matches an
  allow rule.
* Text that cannot be parsed at all (an unterminated quote, ``;;`` outside ``case``, syntax the
  parser does not support) sets :attr:`ParsedCommand.error`; nothing is then allowed by a rule.
* Every command that could run is reported so that *deny* rules can see it: commands inside
  ``$(...)``, backquotes, ``<(...)``, a ``bash -c``/``eval`` string, or behind a wrapper such as
  ``sudo``/``env``/``timeout``/``xargs``/``find -exec`` are added as extra parts with
  ``nested=True``.

:attr:`ParsedCommand.allowable` is True iff there is no error, at least one non-nested part, and
every non-nested part is clean. Nested parts never decide it: parts from substitutions and shell
strings only exist when their outer part is already opaque, and parts behind a wrapper are the
user's explicit choice (an allow rule ``sudo`` allows ``sudo rm x``).

The parser is stdlib only, never raises (an internal failure becomes an ``error``), runs in time
roughly linear in the input, and limits nesting to ``_MAX_DEPTH`` levels.
"""

from __future__ import annotations

import re

import attrs

__all__ = ["CommandPart", "ParsedCommand", "parse_command", "split_words"]


@attrs.frozen(kw_only=True)
class CommandPart:
    """One simple command: ``git status`` in ``git status && make``.

    ``words`` are the command's words after quote removal, with leading assignments, redirections
    and compound-syntax keywords (``then``, ``{``, a subshell's ``(``) removed, so ``words[0]`` is
    the program. Two exceptions keep what is there: a part that is only a keyword (``fi``, ``}``,
    the ``)`` closing a subshell, ``for x in a b``) or only assignments keeps those words, and a
    bare redirection (``> f``) has no words at all. Such parts are always opaque.

    Words holding an expansion keep the expansion's source text (``$HOME``, ``$(date)``).
    """

    words: tuple[str, ...]
    text: str
    opaque: str | None = None
    nested: bool = False


@attrs.frozen(kw_only=True)
class ParsedCommand:
    """The parts of a command line, in source order, or why it cannot be parsed."""

    parts: tuple[CommandPart, ...]
    error: str | None = None

    @property
    def allowable(self) -> bool:
        """Whether an allow rule may allow this command at all.

        True iff there is no error, at least one non-nested part, and every non-nested part is
        clean. Nested parts are not consulted: those from substitutions or shell strings only
        exist under an opaque outer part, and those behind a wrapper (``sudo rm x``) are covered
        by the user's rule for the wrapper.
        """
        top = [part for part in self.parts if not part.nested]
        return self.error is None and bool(top) and all(part.opaque is None for part in top)


def parse_command(text: str) -> ParsedCommand:
    """Split *text* into the simple commands a shell would run; never raises."""
    fast = _plain_parse(text)
    if fast is not None:
        return fast
    try:
        parts, error = _Parser(text, 0).run()
    except RecursionError:
        return ParsedCommand(parts=(), error="nesting too deep")
    except Exception as exc:
        # The rule engine must fail closed, not crash, if this parser has a bug.
        return ParsedCommand(parts=(), error=f"internal parser error ({type(exc).__name__})")
    return ParsedCommand(parts=tuple(parts), error=error)


# The fast path: a line of plain words (no quoting, expansion, redirection, globbing, comment
# or keyword) joined by separators, none of whose programs the full parser treats specially,
# is split by two regular expressions. Anything else — or anything this path is unsure of —
# returns None and goes to the full parser; a property test checks both agree.
_PLAIN_LINE = re.compile(r"[A-Za-z0-9_\-./,:=+%@ \t\n;&|]*")
_PLAIN_SEPARATOR = re.compile(r"\|\||&&|\|&|[;&|\n]")
_PLAIN_WORD = re.compile(r"[^ \t]+")


def _plain_parse(text: str) -> ParsedCommand | None:
    if _PLAIN_LINE.fullmatch(text) is None:
        return None
    parts: list[CommandPart] = []
    for segment in _PLAIN_SEPARATOR.split(text):
        words = tuple(_PLAIN_WORD.findall(segment))
        if not words:
            return None  # an empty command: the full parser says whether it is an error
        program = words[0]
        if (
            "=" in program
            or program in _KEYWORDS
            or program.rsplit("/", 1)[-1] in _SPECIAL_PROGRAMS
        ):
            return None
        parts.append(CommandPart(words=words, text=segment.strip(" \t")))
    return ParsedCommand(parts=tuple(parts))


def split_words(text: str) -> tuple[str, ...] | None:
    """The words of *text* if it is exactly one clean simple command, else None.

    For rule prefixes: ``split_words("'git' \\"status\\"")`` is ``("git", "status")``; compound,
    opaque, unparseable or empty text gives None.
    """
    parsed = parse_command(text)
    top = [part for part in parsed.parts if not part.nested]
    if not parsed.allowable or len(top) != 1 or not top[0].words:
        return None
    return top[0].words


_MAX_DEPTH = 16

# Characters that end an unquoted word.
_META = frozenset(" \t\n;&|()<>")
# A run of characters with no meaning to the scanner, taken in one step.
_PLAIN_RUN = re.compile(r"[^ \t\n;&|()<>\\'\"`$*?\[\]{}]+")
_DQ_PLAIN_RUN = re.compile(r"[^\\\"`$]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPECIAL_PARAMETERS = frozenset("0123456789@*#?-$!")
# Bounded so that a long run of `a[` words cannot make the scan quadratic.
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]\n]{0,256}\])?\+?=")
_ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=", re.DOTALL)
_FD_PREFIX = re.compile(r"(?:[0-9]+|\{[A-Za-z_][A-Za-z0-9_]*\})(?=[<>](?!\())")
_REDIRECT_OP = re.compile(r"&>>|&>|>>|>&|>\||<<<|<<-|<<|<&|<>|>|<")
_SEPARATOR = re.compile(r";;&|;;|;&|;|&&|&|\|\||\|&|\|")
_COND_OPERATOR = re.compile(r"[&|<>()]+")
_FD_DUPLICATE = re.compile(r"[0-9]+-?|-")
_BINARY = frozenset({"&&", "||", "|", "|&"})

# Keywords after which the next word is again in command position.
_PREFIX_KEYWORDS = frozenset({"if", "then", "else", "elif", "while", "until", "do", "!", "{"})
_PREFIX_KEYWORDS |= {"coproc"}
# Keywords that end or frame a compound command; the part keeps them as its words.
_OTHER_KEYWORDS = frozenset({"fi", "done", "esac", "}", "for", "select", "case", "[[", "]]"})
_KEYWORDS = _PREFIX_KEYWORDS | _OTHER_KEYWORDS | {"function"}

_SHELLS = frozenset(
    {"bash", "sh", "zsh", "dash", "ksh", "fish", "mksh", "yash", "rbash", "ash", "csh", "tcsh"}
)
_WRAPPERS = frozenset(
    {
        "sudo",
        "doas",
        "env",
        "nohup",
        "timeout",
        "nice",
        "ionice",
        "xargs",
        "command",
        "builtin",
        "time",
        "stdbuf",
        "setsid",
        "chroot",
        "watch",
        "strace",
        "ltrace",
        "flock",
        "unbuffer",
        "busybox",
    }
)
# Wrapper options that take a value (as the next word when not attached).
_VALUE_OPTIONS: dict[str, frozenset[str]] = {
    "sudo": frozenset(
        {"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T", "-R"}
        | {"--user", "--group", "--host", "--prompt", "--chdir", "--role", "--type"}
        | {"--other-user", "--close-from", "--command-timeout", "--chroot"}
    ),
    "doas": frozenset({"-u", "-C"}),
    "env": frozenset({"-u", "-C", "--unset", "--chdir"}),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "ionice": frozenset({"-c", "-n", "-p", "-P", "-u", "--class", "--classdata", "--pid"}),
    "xargs": frozenset(
        {"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter", "--eof"}
        | {"--replace", "--max-lines", "--max-args", "--max-procs", "--max-chars"}
        | {"--process-slot-var"}
    ),
    "stdbuf": frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}),
    "chroot": frozenset({"--userspec", "--groups"}),
    "watch": frozenset({"-n", "-q", "--interval", "--equexit"}),
    "strace": frozenset({"-o", "-e", "-p", "-s", "-u", "-E", "-I", "-b", "-a", "-P", "-X", "-O"}),
    "ltrace": frozenset({"-o", "-e", "-p", "-s", "-u", "-n", "-a", "-l", "-x", "-w", "-A", "-D"}),
    "flock": frozenset({"-w", "-E", "--timeout", "--wait", "--conflict-exit-code"}),
    "time": frozenset({"-o", "-f", "--output", "--format"}),
    "exec": frozenset({"-a"}),
    "su": frozenset({"-s", "-g", "-G", "-w", "--shell", "--group", "--supp-group"}),
}
# Wrapper options whose value is itself a shell command line.
_STRING_OPTIONS: dict[str, frozenset[str]] = {
    "env": frozenset({"-S", "--split-string"}),
    "flock": frozenset({"-c", "--command"}),
    "su": frozenset({"-c", "--command", "--session-command"}),
}
# Non-option words a wrapper takes before the wrapped command (timeout's duration).
_POSITIONALS = {"timeout": 1, "chroot": 1, "flock": 1}
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
# Programs whose words the full parser reads (their own reasons, or nested commands).
_SPECIAL_PROGRAMS = _SHELLS | _WRAPPERS | {"eval", "source", ".", "exec", "find", "su", "runuser"}


class _ParseError(Exception):
    """Why the text cannot be parsed; becomes :attr:`ParsedCommand.error`."""


class _Word:
    """A scanned word: its value after quote removal and what the scan found in it."""

    __slots__ = (
        "assign",
        "brace",
        "end",
        "glob",
        "nested",
        "quoted",
        "reasons",
        "start",
        "synthetic",
        "value",
    )

    def __init__(self, start: int, synthetic: str | None = None) -> None:
        self.start = start
        self.end = start
        # Synthetic words stand for operator syntax: "(" opening a subshell, ")" closing it,
        # "()" of a function definition, "((" an arithmetic command.
        self.synthetic = synthetic
        self.value = synthetic or ""
        self.quoted = False
        self.assign = False
        self.glob = False
        self.brace = False
        self.reasons: list[str] = []
        self.nested: list[CommandPart] = []

    @property
    def static(self) -> bool:
        """Whether the value is known from the text (no expansion, not operator syntax)."""
        return not self.reasons and self.synthetic is None


class _Command:
    """A simple command being collected, up to its separator."""

    __slots__ = ("command_position", "end", "head", "name_next", "redirects", "start", "words")

    def __init__(self) -> None:
        self.start = -1
        self.end = -1
        self.words: list[_Word] = []
        self.redirects: list[tuple[list[str], list[CommandPart]]] = []
        # Whether the next word would be the program (or a keyword), and the index of the word
        # that ended command position: `name` in `name() {` must be that word.
        self.command_position = True
        self.name_next = False
        self.head = -1

    @property
    def empty(self) -> bool:
        return not self.words and not self.redirects

    def touch(self, start: int, end: int) -> None:
        if self.start < 0:
            self.start = start
        self.end = end

    def reasons(self) -> list[str]:
        found = [reason for word in self.words for reason in word.reasons]
        found += [reason for reasons, _ in self.redirects for reason in reasons]
        return found

    def nested(self) -> list[CommandPart]:
        found = [part for word in self.words for part in word.nested]
        found += [part for _, parts in self.redirects for part in parts]
        return found


def _keyword(word: _Word) -> str | None:
    if word.synthetic is not None or word.quoted or word.reasons or word.value not in _KEYWORDS:
        return None
    return word.value


def _basename(value: str) -> str:
    return value.rsplit("/", 1)[-1]


class _Parser:
    """A hand-written scanner over one string; `pos` is the index of the next character."""

    def __init__(self, src: str, depth: int) -> None:
        self.src = src
        self.n = len(src)
        self.pos = 0
        self.depth = depth
        self.soft_error: str | None = None
        # Here-documents whose bodies start after the next newline: (delimiter, strip tabs,
        # body is expanded).
        self.heredocs: list[tuple[str, bool, bool]] = []

    def run(self) -> tuple[list[CommandPart], str | None]:
        """The parts of the whole string and the first error; parts found before it are kept."""
        out: list[CommandPart] = []
        try:
            self._parse_list(out, closer=None)
        except _ParseError as exc:
            return out, str(exc)
        return out, self.soft_error

    # -- nesting -------------------------------------------------------------------------------

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > _MAX_DEPTH:
            raise _ParseError("nesting too deep")

    def _leave(self) -> None:
        self.depth -= 1

    def _soft(self, error: str) -> None:
        # The first error wins; later ones are usually consequences of it.
        if self.soft_error is None:
            self.soft_error = error

    def _parse_string(self, text: str, label: str, *, hard: bool = False) -> list[CommandPart]:
        """Parse *text* (a shell string run by the command) as nested parts."""
        if self.depth + 1 > _MAX_DEPTH:
            raise _ParseError("nesting too deep")
        parts, error = _Parser(text, self.depth + 1).run()
        if error is not None:
            if hard:
                raise _ParseError(error)
            self._soft(f"{label}: {error}")
        return [attrs.evolve(part, nested=True) for part in parts]

    def _scan_expansions(self, text: str, label: str) -> list[CommandPart]:
        """Nested parts of the substitutions in *text* expanded like a here-document body."""
        if "$" not in text and "`" not in text:
            return []
        if self.depth + 1 > _MAX_DEPTH:
            raise _ParseError("nesting too deep")
        parser = _Parser(text, self.depth + 1)
        word = _Word(0)
        try:
            parser._expand_all(word)
        except _ParseError as exc:
            self._soft(f"{label}: {exc}")
        if parser.soft_error is not None:
            self._soft(parser.soft_error)
        return word.nested

    def _expand_all(self, word: _Word) -> None:
        buf: list[str] = []
        while self.pos < self.n:
            c = self.src[self.pos]
            if c == "\\":
                self.pos += 2
            elif c == "$":
                self._dollar(word, buf, in_dq=True)
            elif c == "`":
                self._backtick(word, buf, in_dq=True)
            else:
                self.pos += 1

    # -- command lists -------------------------------------------------------------------------

    def _parse_list(self, out: list[CommandPart], *, closer: str | None) -> None:
        """Parse commands into *out* until the end, or past the `)` ending a *closer*."""
        command = _Command()
        pending: str | None = None  # a binary operator still waiting for its right-hand side
        parens = 0
        while True:
            self._skip_blanks()
            if self.pos >= self.n:
                if not command.empty:
                    self._emit(command, out)
                    pending = None
                if pending is not None:
                    raise _ParseError(f"unexpected end of input after {pending}")
                if closer is not None:
                    raise _ParseError(f"unterminated {closer}")
                if parens:
                    raise _ParseError("unterminated subshell")
                return
            c = self.src[self.pos]
            if c == "#":
                self._skip_comment()
            elif c == "\n":
                self.pos += 1
                if not command.empty:
                    self._emit(command, out)
                    command = _Command()
                    pending = None
                self._read_heredocs(out)
            elif self._at_redirect():
                self._read_redirect(command)
            elif c in ";&|":
                pending = self._separator(command, out)
                command = _Command()
            elif c == "(":
                parens += self._open_paren(command)
            elif c == ")":
                if command.empty and pending is not None:
                    raise _ParseError("syntax error near )")
                self._emit(command, out)
                pending = None
                self.pos += 1
                if not parens:  # the `)` ending this substitution
                    if closer is None:
                        raise _ParseError("syntax error near )")
                    return
                parens -= 1
                # The `)` closing a subshell is a part of its own, so that a redirection after
                # it (`( ... ) > f`) marks a part opaque.
                command = _Command()
                closing = _Word(self.pos - 1, ")")
                closing.end = self.pos
                self._append(command, closing)
                command.command_position = False
            else:
                self._add_word(command, self._read_word())

    def _separator(self, command: _Command, out: list[CommandPart]) -> str | None:
        match = _SEPARATOR.match(self.src, self.pos)
        op = match.group() if match else self.src[self.pos]
        if command.empty or op in (";;", ";;&", ";&"):
            raise _ParseError(f"syntax error near {op}")
        self.pos += len(op)
        self._emit(command, out)
        return op if op in _BINARY else None

    def _skip_blanks(self) -> None:
        src, n = self.src, self.n
        while self.pos < n:
            c = src[self.pos]
            if c in " \t":
                self.pos += 1
            elif c == "\\" and src.startswith("\n", self.pos + 1):
                self.pos += 2  # line continuation
            else:
                return

    def _skip_comment(self) -> None:
        end = self.src.find("\n", self.pos)
        self.pos = self.n if end < 0 else end

    def _at_word_start(self) -> bool:
        if self.pos >= self.n:
            return False
        c = self.src[self.pos]
        return c not in _META or (c in "<>" and self.src.startswith("(", self.pos + 1))

    def _emit(self, command: _Command, out: list[CommandPart]) -> None:
        if command.empty:
            return
        text = self.src[command.start : command.end].strip()
        parts = self._analyze(command.words, command.reasons(), text, nested=False)
        out.append(parts[0])
        out.extend(command.nested())
        out.extend(parts[1:])

    def _append(self, command: _Command, word: _Word) -> None:
        command.touch(word.start, word.end)
        command.words.append(word)

    def _add_word(self, command: _Command, word: _Word) -> None:
        """Append a word and track whether the next one is in command position."""
        self._append(command, word)
        if command.name_next:  # the NAME of `function NAME`
            command.name_next = False
            command.command_position = True
            command.head = len(command.words) - 1
            return
        if not command.command_position or word.assign:
            return
        keyword = _keyword(word)
        if keyword in _PREFIX_KEYWORDS:
            return
        command.command_position = False
        command.head = len(command.words) - 1
        if keyword == "function":
            command.name_next = True
        elif keyword == "case":
            raise _ParseError("unsupported shell syntax: case")
        elif keyword == "[[":
            self._read_condition(command)

    def _read_condition(self, command: _Command) -> None:
        """The words of `[[ ... ]]`, where `&&`, `<`, `(` and the like are plain words."""
        while True:
            self._skip_blanks()
            if self.pos < self.n and self.src[self.pos] == "\n":
                self.pos += 1
                continue
            if self.pos >= self.n:
                raise _ParseError("unterminated [[")
            c = self.src[self.pos]
            if c == ";":
                raise _ParseError("syntax error in [[")
            operator = None if self._at_word_start() else _COND_OPERATOR.match(self.src, self.pos)
            if operator is not None:
                word = _Word(self.pos)
                word.value = operator.group()
                word.quoted = True  # an operator here is never a keyword
                self.pos = word.end = operator.end()
                self._append(command, word)
                continue
            word = self._read_word()
            self._append(command, word)
            if _keyword(word) == "]]":
                return

    def _open_paren(self, command: _Command) -> int:
        """Handle `(`: a function definition, an arithmetic command, or a subshell (returns 1)."""
        after = self.pos + 1
        while after < self.n and self.src[after] in " \t":
            after += 1
        if self.src.startswith(")", after) and command.head == len(command.words) - 1 >= 0:
            word = _Word(self.pos, "()")
            self.pos = word.end = after + 1
            self._append(command, word)
            command.command_position = True
            return 0
        follows_for = (
            command.head == len(command.words) - 1 >= 0 and _keyword(command.words[-1]) == "for"
        )
        if (command.command_position or follows_for) and self.src.startswith("((", self.pos):
            end = self._scan_arithmetic(self.pos + 2)
            if end is not None:
                word = _Word(self.pos, "((")
                word.value = self.src[self.pos : end]
                word.reasons.append("arithmetic command")
                word.nested.extend(
                    self._scan_expansions(self.src[self.pos + 2 : end - 2], "arithmetic command")
                )
                self.pos = word.end = end
                self._append(command, word)
                command.command_position = False
                return 0
        if not command.command_position:
            raise _ParseError("syntax error near (")
        word = _Word(self.pos, "(")
        self.pos = word.end = self.pos + 1
        self._append(command, word)
        return 1

    # -- here-documents ------------------------------------------------------------------------

    def _read_heredocs(self, out: list[CommandPart]) -> None:
        """Consume the bodies of the here-documents opened on the line just ended."""
        pending, self.heredocs = self.heredocs, []
        for delimiter, strip_tabs, expand in pending:
            body_start = body_end = self.pos
            while self.pos < self.n:
                line_end = self.src.find("\n", self.pos)
                if line_end < 0:
                    line_end = self.n
                line = self.src[self.pos : line_end]
                body_end = self.pos
                self.pos = min(line_end + 1, self.n)
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
                body_end = self.pos
            if expand:
                body = self.src[body_start:body_end]
                out.extend(self._scan_expansions(body, "here-document"))

    # -- redirections --------------------------------------------------------------------------

    def _at_redirect(self) -> bool:
        c = self.src[self.pos]
        if c in "<>":
            return not self.src.startswith("(", self.pos + 1)
        if c == "&":
            return self.src.startswith("&>", self.pos)
        if c.isdigit() or c == "{":
            return _FD_PREFIX.match(self.src, self.pos) is not None
        return False

    def _read_redirect(self, command: _Command) -> None:
        start = self.pos
        prefix = _FD_PREFIX.match(self.src, self.pos)
        fd_variable = prefix is not None and prefix.group().startswith("{")
        if prefix is not None:
            self.pos = prefix.end()
        match = _REDIRECT_OP.match(self.src, self.pos)
        if match is None:
            raise _ParseError("syntax error in redirection")
        op = match.group()
        self.pos = match.end()
        self._skip_blanks()
        if not self._at_word_start():
            raise _ParseError(f"missing redirection target after {op}")
        target = self._read_word()
        command.touch(start, self.pos)
        reasons = [
            reason
            for reason in (self._redirect_reason(op, target, fd_variable=fd_variable),)
            if reason is not None
        ]
        command.redirects.append((reasons + target.reasons, target.nested))
        if op in ("<<", "<<-"):
            self.heredocs.append((target.value, op == "<<-", not target.quoted))

    @staticmethod
    def _redirect_reason(op: str, target: _Word, *, fd_variable: bool) -> str | None:
        if fd_variable:
            return "file descriptor variable"
        if op in ("<<", "<<-"):
            return "here-document"
        if op == "<<<":
            return "here-string"
        if op in (">&", "<&"):
            if not target.static:
                return None  # the target's own reason (an expansion) marks the part
            return None if _FD_DUPLICATE.fullmatch(target.value) else "redirection to a file"
        if target.static and target.value == "/dev/null":
            return None
        return "redirection to a file"

    # -- words ---------------------------------------------------------------------------------

    def _read_word(self) -> _Word:
        src, n = self.src, self.n
        word = _Word(self.pos)
        assignment = _ASSIGNMENT.match(src, self.pos)
        word.assign = assignment is not None
        buf: list[str] = []
        bracket = brace = False
        while self.pos < n:
            c = src[self.pos]
            if c in "<>" and src.startswith("(", self.pos + 1):
                self._substitution(word, buf, "process substitution", 2)
            elif c == "(" and assignment is not None and self.pos == assignment.end():
                self._array(word, buf)
            elif c in _META:
                break
            elif c == "\\":
                self._backslash(word, buf)
            elif c == "'":
                self._single_quoted(word, buf)
            elif c == '"':
                word.quoted = True
                self._double_quoted(word, buf)
            elif c == "`":
                self._backtick(word, buf, in_dq=False)
            elif c == "$":
                self._dollar(word, buf, in_dq=False)
            else:
                # Unquoted pattern characters: `[` only makes a glob with a later `]`, `{` only
                # makes a brace expansion with a later `}`.
                if c in "*?" or (c == "]" and bracket):
                    word.glob = True
                elif c == "}" and brace:
                    word.brace = True
                bracket = bracket or c == "["
                brace = brace or c == "{"
                run = _PLAIN_RUN.match(src, self.pos)
                end = run.end() if run else self.pos + 1
                buf.append(src[self.pos : end])
                self.pos = end
        if self.pos == word.start:
            raise _ParseError(f"syntax error near {src[self.pos]!r}")
        word.value = "".join(buf)
        word.end = self.pos
        return word

    def _backslash(self, word: _Word, buf: list[str]) -> None:
        following = self.src[self.pos + 1 : self.pos + 2]
        if following == "\n":
            self.pos += 2  # line continuation
        elif not following:
            buf.append("\\")  # a trailing backslash is literal
            self.pos += 1
        else:
            word.quoted = True
            buf.append(following)
            self.pos += 2

    def _single_quoted(self, word: _Word, buf: list[str]) -> None:
        end = self.src.find("'", self.pos + 1)
        if end < 0:
            raise _ParseError("unterminated single quote")
        word.quoted = True
        buf.append(self.src[self.pos + 1 : end])
        self.pos = end + 1

    def _double_quoted(self, word: _Word, buf: list[str]) -> None:
        src, n = self.src, self.n
        self.pos += 1
        while self.pos < n:
            c = src[self.pos]
            if c == '"':
                self.pos += 1
                return
            if c == "\\":
                following = src[self.pos + 1 : self.pos + 2]
                if following == "\n":
                    self.pos += 2
                elif following and following in '$`"\\':
                    buf.append(following)
                    self.pos += 2
                else:
                    buf.append(c)
                    self.pos += 1
            elif c == "$":
                self._dollar(word, buf, in_dq=True)
            elif c == "`":
                self._backtick(word, buf, in_dq=True)
            else:
                run = _DQ_PLAIN_RUN.match(src, self.pos)
                end = run.end() if run else self.pos + 1
                buf.append(src[self.pos : end])
                self.pos = end
        raise _ParseError("unterminated double quote")

    def _array(self, word: _Word, buf: list[str]) -> None:
        """The `(a b c)` of an array assignment `name=(a b c)`."""
        start = self.pos
        self.pos += 1
        self._enter()
        while True:
            self._skip_blanks()
            if self.pos >= self.n:
                raise _ParseError("unterminated array assignment")
            c = self.src[self.pos]
            if c == ")":
                self.pos += 1
                break
            if c == "\n":
                self.pos += 1
            elif c == "#":
                self._skip_comment()
            elif not self._at_word_start():
                raise _ParseError(f"syntax error near {c} in array assignment")
            else:
                element = self._read_word()
                word.reasons.extend(element.reasons)
                word.nested.extend(element.nested)
        self._leave()
        word.quoted = True
        buf.append(self.src[start : self.pos])

    def _backtick(self, word: _Word, buf: list[str], *, in_dq: bool) -> None:
        src, n = self.src, self.n
        start = self.pos
        self.pos += 1
        inner: list[str] = []
        while True:
            if self.pos >= n:
                raise _ParseError("unterminated backquote")
            c = src[self.pos]
            if c == "`":
                self.pos += 1
                break
            if c == "\\" and self.pos + 1 < n:
                following = src[self.pos + 1]
                # Inside backquotes a backslash only escapes $ ` \ (and " within double quotes).
                if following in "$`\\" or (in_dq and following == '"'):
                    inner.append(following)
                else:
                    inner.append(c + following)
                self.pos += 2
            else:
                inner.append(c)
                self.pos += 1
        word.reasons.append("command substitution")
        word.nested.extend(self._parse_string("".join(inner), "backquotes", hard=True))
        buf.append(src[start : self.pos])

    def _substitution(self, word: _Word, buf: list[str], reason: str, skip: int) -> None:
        """`$(...)`, `<(...)` or `>(...)`: parse the commands inside up to the matching `)`."""
        start = self.pos
        self.pos += skip
        self._enter()
        inner: list[CommandPart] = []
        self._parse_list(inner, closer=reason)
        self._leave()
        word.reasons.append(reason)
        word.nested.extend(attrs.evolve(part, nested=True) for part in inner)
        buf.append(self.src[start : self.pos])

    def _dollar(self, word: _Word, buf: list[str], *, in_dq: bool) -> None:
        src, pos = self.src, self.pos
        following = src[pos + 1 : pos + 2]
        if following == "(":
            if src.startswith("((", pos + 1):
                end = self._scan_arithmetic(pos + 3)
                if end is not None:
                    word.reasons.append("arithmetic expansion")
                    word.nested.extend(
                        self._scan_expansions(src[pos + 3 : end - 2], "arithmetic expansion")
                    )
                    buf.append(src[pos:end])
                    self.pos = end
                    return
            self._substitution(word, buf, "command substitution", 2)
        elif following == "{":
            self._braced_parameter(word, buf, in_dq=in_dq)
        elif following == "[":
            self._old_arithmetic(word, buf)
        elif following == "'" and not in_dq:
            self._ansi_c(word, buf)
        elif following == '"' and not in_dq:
            # $"..." is looked up in a message catalog: its value is not the text.
            word.reasons.append("locale translation")
            word.quoted = True
            self.pos += 1
            self._double_quoted(word, buf)
        else:
            name = _NAME.match(src, pos + 1)
            if name is not None:
                end = name.end()
            elif following and following in _SPECIAL_PARAMETERS:
                end = pos + 2
            else:
                buf.append("$")  # a `$` followed by nothing meaningful is literal
                self.pos = pos + 1
                return
            word.reasons.append("parameter expansion")
            buf.append(src[pos:end])
            self.pos = end

    def _braced_parameter(self, word: _Word, buf: list[str], *, in_dq: bool) -> None:
        src, n = self.src, self.n
        start = self.pos
        self.pos += 2
        self._enter()
        first = len(word.reasons)
        scratch: list[str] = []
        while True:
            if self.pos >= n:
                raise _ParseError("unterminated parameter expansion")
            c = src[self.pos]
            if c == "}":
                self.pos += 1
                break
            if c == "\\":
                self.pos += 2
            elif c == "'" and not in_dq:
                self._single_quoted(word, scratch)
            elif c == '"':
                self._double_quoted(word, scratch)
            elif c == "$":
                self._dollar(word, scratch, in_dq=in_dq)
            elif c == "`":
                self._backtick(word, scratch, in_dq=in_dq)
            else:
                self.pos += 1
        self._leave()
        word.reasons.insert(first, "parameter expansion")
        buf.append(src[start : self.pos])

    def _scan_arithmetic(self, pos: int) -> int | None:
        """The index past the `))` closing an arithmetic body starting at *pos*.

        None when a lone `)` shows the text is not arithmetic after all (`$( (ls) )` written
        without the space); the caller then parses it as a substitution or subshell.
        """
        src, n = self.src, self.n
        depth = 0
        while pos < n:
            c = src[pos]
            if c == "\\":
                pos += 2
                continue
            if c in "'\"":
                end = src.find(c, pos + 1)
                if end < 0:
                    break
                pos = end + 1
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                if depth:
                    depth -= 1
                elif src.startswith("))", pos):
                    return pos + 2
                else:
                    return None
            pos += 1
        raise _ParseError("unterminated arithmetic expansion")

    def _old_arithmetic(self, word: _Word, buf: list[str]) -> None:
        """The obsolete `$[ ... ]` form of arithmetic expansion."""
        start = self.pos
        depth = 0
        pos = self.pos + 2
        while pos < self.n:
            c = self.src[pos]
            if c == "[":
                depth += 1
            elif c == "]":
                if not depth:
                    word.reasons.append("arithmetic expansion")
                    self.pos = pos + 1
                    buf.append(self.src[start : self.pos])
                    return
                depth -= 1
            pos += 1
        raise _ParseError("unterminated arithmetic expansion")

    def _ansi_c(self, word: _Word, buf: list[str]) -> None:
        """`$'...'`: kept undecoded, so the part is opaque."""
        start = self.pos
        pos = self.pos + 2
        while pos < self.n:
            c = self.src[pos]
            if c == "\\":
                pos += 2
            elif c == "'":
                word.reasons.append("ansi-c quoting")
                word.quoted = True
                self.pos = pos + 1
                buf.append(self.src[start : self.pos])
                return
            else:
                pos += 1
        raise _ParseError("unterminated ansi-c quote")

    # -- analysis of one simple command --------------------------------------------------------

    def _analyze(
        self, words: list[_Word], reasons: list[str], text: str, *, nested: bool
    ) -> list[CommandPart]:
        """The part for *words* (first) and the nested parts of the commands it runs."""
        lead: list[str] = []
        extra: list[CommandPart] = []
        rest = words[self._skip_prefix(words, lead) :]
        shown = rest or words
        if rest:
            lead.extend(self._program_reasons(rest, extra))
        found = lead + reasons
        if not words:
            found.append("redirection without a command")
        part = CommandPart(
            words=tuple(word.value for word in shown),
            text=text,
            opaque=found[0] if found else None,
            nested=nested,
        )
        return [part, *extra]

    @staticmethod
    def _skip_prefix(words: list[_Word], lead: list[str]) -> int:
        """The index of the program word, past assignments and keywords that precede it."""
        index = 0
        while index < len(words):
            word = words[index]
            keyword = _keyword(word)
            if word.synthetic == "(":
                lead.append("subshell")
            elif word.assign:
                lead.append("leading variable assignment")
            elif keyword in _PREFIX_KEYWORDS:
                lead.append(f"shell keyword ({keyword})")
            elif keyword == "function":
                lead.append("shell keyword (function)")
                index += 1  # the function's name
                if index + 1 < len(words) and words[index + 1].synthetic == "()":
                    index += 1
            elif index + 1 < len(words) and words[index + 1].synthetic == "()":
                lead.append("function definition")
                index += 1
            else:
                return index
            index += 1
        return index

    def _program_reasons(self, rest: list[_Word], extra: list[CommandPart]) -> list[str]:
        program = rest[0]
        if program.synthetic == ")":
            return ["subshell"]
        if program.synthetic == "((":
            return []  # the word's own reason says "arithmetic command"
        keyword = _keyword(program)
        if keyword is not None:
            return [f"shell keyword ({keyword})"]
        found: list[str] = []
        if program.glob:
            found.append("glob in the program name")
        if program.brace:
            found.append("brace expansion in the program name")
        if program.static:
            found += self._program_effects(_basename(program.value), rest, extra)
        return found

    def _program_effects(self, name: str, rest: list[_Word], extra: list[CommandPart]) -> list[str]:
        """Reasons from what the program is, adding the commands it would run to *extra*."""
        if name in _SHELLS:
            runs_string, script = self._shell_script(rest)
            if not runs_string:
                return []
            if script is not None:
                extra += self._parse_string(script, f"{name} -c string")
            return [f"runs a shell string ({name} -c)"]
        if name == "eval":
            extra += self._parse_string(" ".join(word.value for word in rest[1:]), "eval string")
            return ["eval"]
        if name in ("source", "."):
            return ["source"]
        if name == "exec":
            self._wrapped(name, rest, extra)
            return ["exec"]
        if name in _WRAPPERS:
            self._wrapped(name, rest, extra)
        elif name == "find":
            self._find_exec(rest, extra)
        elif name in ("su", "runuser"):
            self._skip_options(name, rest, 1, extra, every=True)
        return []

    @staticmethod
    def _shell_script(rest: list[_Word]) -> tuple[bool, str | None]:
        """Whether a shell is given `-c` (also `-lc`, fish's `--command`) and its string."""
        index = 1
        runs_string = False
        while index < len(rest):
            value = rest[index].value
            if not rest[index].static or len(value) < 2 or value[0] not in "-+":
                break
            index += 1
            if value == "--":
                break
            if value.startswith("--"):
                key, eq, attached = value.partition("=")
                if key == "--command":
                    if eq:
                        return True, attached
                    runs_string = True
                    break
                if key in ("--rcfile", "--init-file", "--init-command") and not eq:
                    index += 1
                continue
            letters = value[1:]
            runs_string = runs_string or (value[0] == "-" and "c" in letters)
            if "o" in letters or "O" in letters:
                index += 1  # -o pipefail
        if not runs_string:
            return False, None
        return True, rest[index].value if index < len(rest) else None

    def _wrapped(self, name: str, rest: list[_Word], extra: list[CommandPart]) -> None:
        """Add the command a wrapper runs (`sudo -u root rm x` runs `rm x`) as a nested part."""
        index = self._skip_options(name, rest, 1, extra)
        index += _POSITIONALS.get(name, 0)
        if name == "flock":
            index = self._skip_options(name, rest, index, extra)  # `flock FILE -c CMD`
        if index >= len(rest):
            return
        if name == "watch":
            # watch joins its arguments and runs them with `sh -c`.
            joined = " ".join(word.value for word in rest[index:])
            extra += self._parse_string(joined, "watch command")
        else:
            extra += self._analyze_nested(rest[index:])

    def _skip_options(
        self,
        name: str,
        rest: list[_Word],
        index: int,
        extra: list[CommandPart],
        *,
        every: bool = False,
    ) -> int:
        """The index past *name*'s leading options (every word with *every*).

        Option values that are themselves command lines (`env -S`, `flock -c`, `su -c`) are
        parsed into *extra*.
        """
        takes_value = _VALUE_OPTIONS.get(name, frozenset())
        runs_value = _STRING_OPTIONS.get(name, frozenset())
        while index < len(rest):
            word = rest[index]
            value = word.value
            if not word.static:
                break
            if (name in ("env", "sudo", "doas") and _ENV_ASSIGNMENT.match(value)) or (
                name == "env" and value == "-"
            ):
                index += 1
                continue
            if value == "--" and not every:
                return index + 1
            if len(value) < 2 or value[0] != "-":
                if every:
                    index += 1
                    continue
                break
            index += 1
            option, attached = self._option(value, takes_value | runs_value)
            if option is None:
                continue
            if attached is None and index < len(rest):
                attached = rest[index].value
                index += 1
            if option in runs_value and attached is not None:
                extra += self._parse_string(attached, f"{name} {option} string")
        return index

    @staticmethod
    def _option(value: str, with_value: frozenset[str]) -> tuple[str | None, str | None]:
        """The option in *value* that takes a value and its attached value, if any."""
        if value.startswith("--"):
            key, eq, attached = value.partition("=")
            if key not in with_value:
                return None, None
            return key, attached if eq else None
        for offset in range(1, len(value)):
            option = "-" + value[offset]
            if option in with_value:
                return option, value[offset + 1 :] or None
        return None, None

    def _find_exec(self, rest: list[_Word], extra: list[CommandPart]) -> None:
        """`find ... -exec CMD {} ;` runs CMD."""
        index = 1
        while index < len(rest):
            if rest[index].static and rest[index].value in _FIND_EXEC:
                end = index + 1
                while end < len(rest) and not (rest[end].static and rest[end].value in (";", "+")):
                    end += 1
                if end > index + 1:
                    extra += self._analyze_nested(rest[index + 1 : end])
                index = end
            index += 1

    def _analyze_nested(self, words: list[_Word]) -> list[CommandPart]:
        self._enter()
        text = self.src[words[0].start : words[-1].end].strip()
        reasons = [reason for word in words for reason in word.reasons]
        parts = self._analyze(words, reasons, text, nested=True)
        self._leave()
        return parts
