"""broker rules: check rules files, and explain what they decide for one call.

examples:
  broker rules check .broker/rules.toml ~/.config/broker/rules.toml
  broker rules check .claude/settings.json          Claude Code's permissions, read as rules
  broker rules explain --rules .broker/rules.toml bash '{"command": "git status; curl x | sh"}'
  broker rules explain --rules gate.toml --managed /etc/broker/rules.toml write_file \\
      '{"path": "/etc/passwd"}'

check: exit 0 when every file loads and every rule's examples hold; 1 naming every problem,
one per line, on stdout; 2 when the command cannot run as asked.

explain: prints the decision (allow, ask, deny, or "no rule: the answerers are asked"), the
rule that made it (layer, file, index, the rule as written) and, for a command, which part
matched which rule or why none could. Exit 0 whatever the decision; 1 when a rules file has
problems; 2 for bad arguments (ARGS_JSON not a JSON object).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from .._display import printable
from ..rules import Layer, Rule, RuleSet, RulesFileError, load_rules

if TYPE_CHECKING:
    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["register"]

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_CANNOT_RUN = 2


def register(sub: _Sub) -> None:
    """Add the ``rules`` command to the top-level sub-parsers *sub*."""
    parser = sub.add_parser(
        "rules",
        help="check rules files and explain their decisions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="rules_command", required=True, metavar="ACTION")
    check = actions.add_parser("check", help="load rules files and check their examples")
    check.add_argument("files", nargs="+", metavar="FILE", help="a rules file (.toml or .json)")
    check.set_defaults(func=run_check)
    explain = actions.add_parser("explain", help="what the rules decide for one call")
    for layer in Layer:
        if layer is Layer.SESSION:
            continue
        explain.add_argument(
            f"--{layer.value}" if layer is not Layer.PROJECT else "--rules",
            action="append",
            default=[],
            dest=layer.value,
            metavar="FILE",
            help=f"a {layer.value} rules file (repeatable)",
        )
    explain.add_argument("--cwd", help="the working folder relative paths are read against")
    explain.add_argument("tool", metavar="TOOL", help="the tool's name (bash, write_file...)")
    explain.add_argument(
        "arguments", nargs="?", metavar="ARGS_JSON", help="the call's arguments, a JSON object"
    )
    explain.set_defaults(func=run_explain)


def run_check(args: argparse.Namespace) -> int:
    """``broker rules check FILE...``."""
    problems: list[str] = []
    for file in args.files:
        try:
            rules = load_rules(file, Layer.PROJECT)
        except RulesFileError as exc:
            problems.extend(exc.problems)
            continue
        print(f"{printable(file)}: {len(rules)} rules, examples hold")
    for problem in problems:
        print(printable(problem))
    return EXIT_PROBLEMS if problems else EXIT_OK


def run_explain(args: argparse.Namespace) -> int:
    """``broker rules explain [--rules FILE]... TOOL [ARGS_JSON]``."""
    arguments = None
    if args.arguments is not None:
        try:
            arguments = json.loads(args.arguments)
        except json.JSONDecodeError as exc:
            print(
                f"broker rules explain: ARGS_JSON is not JSON ({exc.msg}): quote it",
                file=sys.stderr,
            )
            return EXIT_CANNOT_RUN
        if not isinstance(arguments, dict):
            print(
                "broker rules explain: ARGS_JSON must be a JSON object, e.g. "
                '\'{"command": "git status"}\'',
                file=sys.stderr,
            )
            return EXIT_CANNOT_RUN
    rules: list[Rule] = []
    problems: list[str] = []
    for layer in (Layer.MANAGED, Layer.USER, Layer.PROJECT):
        for file in getattr(args, layer.value):
            try:
                rules.extend(load_rules(file, layer))
            except RulesFileError as exc:
                problems.extend(exc.problems)
    if problems:
        for problem in problems:
            print(printable(problem))
        return EXIT_PROBLEMS
    verdict = RuleSet(rules).decide(args.tool, arguments, cwd=args.cwd, explain=True)
    if verdict.decision is None:
        print("decision: none: no rule decides; the answerers are asked")
    else:
        print(f"decision: {verdict.decision}")
    if verdict.rule is not None:
        origin = verdict.rule.origin
        print(f"rule: {printable(origin.describe())}: {printable(origin.text)}")
    for part in verdict.parts:
        text = printable(part.text) or "(the command)"
        if part.rule is not None:
            print(f"part: {text} -> {printable(part.rule.origin.describe())}")
        else:
            print(f"part: {text} -> {printable(part.note or 'no rule')}")
    return EXIT_OK
