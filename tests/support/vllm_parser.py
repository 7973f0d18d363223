"""`vllm bench serve`'s parser read from vLLM's source without importing it (importing vLLM needs torch and
the rest of its requirements): the ``add_argument`` calls reached from ``vllm.benchmarks.serve.add_cli_args``,
each as (flags, nargs, action class name, choices), as argparse would hold them. ``--backend``'s choices are
the keys of ``ASYNC_REQUEST_FUNCS``, vLLM's table of request functions, as vLLM builds them.

Anything this reader cannot read as a literal (a flag named by a variable, choices computed some other way)
raises :class:`UnreadableParser` naming the file and line, so that a vLLM that builds its parser another
way fails the drop-in test loudly instead of passing with flags left out.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

# argparse's action classes by the names add_argument takes, and the nargs each implies
ACTIONS = {"store": ("_StoreAction", None), "store_true": ("_StoreTrueAction", 0),
           "store_false": ("_StoreFalseAction", 0), "store_const": ("_StoreConstAction", 0),
           "append": ("_AppendAction", None), "append_const": ("_AppendConstAction", 0),
           "count": ("_CountAction", 0), "extend": ("_ExtendAction", None)}

Action = tuple[list[str], Any, str, list[str]]


class UnreadableParser(Exception):
    """vLLM's parser is built in a way this reader does not know."""


class _Module:
    def __init__(self, path: Path, name: str) -> None:
        self.path, self.name = path, name
        self.tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        self.functions = {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}
        self.imported: dict[str, str] = {}  # a name -> the vllm.benchmarks module it was imported from
        for node in self.tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vllm.benchmarks"):
                for alias in node.names:
                    self.imported[alias.asname or alias.name] = node.module or ""

    def where(self, node: ast.AST) -> str:
        return f"{self.path.name}:{getattr(node, 'lineno', '?')}"


class _Reader:
    def __init__(self, root: Path) -> None:
        self.root = root  # the folder that holds vllm/
        self.modules: dict[str, _Module] = {}

    def module(self, name: str) -> _Module:
        if name not in self.modules:
            base = self.root / Path(*name.split("."))
            path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
            if not path.exists():
                raise UnreadableParser(f"{name} is not in {self.root}")
            self.modules[name] = _Module(path, name)
        return self.modules[name]

    def resolve(self, module: _Module, name: str) -> tuple[_Module, ast.FunctionDef] | None:
        """The function ``name`` called in ``module``: its own, or one imported from vllm.benchmarks (a
        package's __init__ may import it from a submodule in turn)."""
        if name in module.functions:
            return module, module.functions[name]
        if name in module.imported:
            return self.resolve(self.module(module.imported[name]), name)
        return None

    def backends(self) -> list[str]:
        m = self.module("vllm.benchmarks.lib.endpoint_request_func")
        for node in m.tree.body:
            target = node.target if isinstance(node, ast.AnnAssign) else (
                node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
            if isinstance(target, ast.Name) and target.id == "ASYNC_REQUEST_FUNCS":
                if not isinstance(node.value, ast.Dict) or not all(
                        isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.value.keys):
                    raise UnreadableParser(f"ASYNC_REQUEST_FUNCS is not a dict of literal names ({m.where(node)})")
                return [k.value for k in node.value.keys]  # type: ignore[union-attr]
        raise UnreadableParser(f"no ASYNC_REQUEST_FUNCS in {m.path}")

    def choices(self, module: _Module, node: ast.expr) -> list[str]:
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and all(
                isinstance(e, ast.Constant) for e in node.elts):
            return [e.value for e in node.elts]  # type: ignore[attr-defined]
        if ast.unparse(node) in ("list(ASYNC_REQUEST_FUNCS.keys())", "list(ASYNC_REQUEST_FUNCS)"):
            return self.backends()
        return [f"<{ast.unparse(node)}>"]  # computed: named as written (only --backend's are compared)

    def action(self, module: _Module, call: ast.Call) -> Action:
        flags = []
        for arg in call.args:
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                raise UnreadableParser(f"a flag not named by a literal ({module.where(call)})")
            flags.append(arg.value)
        keywords = {k.arg: k.value for k in call.keywords}
        if None in keywords:
            raise UnreadableParser(f"add_argument(**...) ({module.where(call)})")
        kind, nargs = ACTIONS["store"]
        action = keywords.get("action")
        if isinstance(action, ast.Constant) and action.value in ACTIONS:
            kind, nargs = ACTIONS[action.value]
        elif isinstance(action, (ast.Attribute, ast.Name)):
            kind = action.attr if isinstance(action, ast.Attribute) else action.id  # a class, by its name
        elif action is not None:
            raise UnreadableParser(f"an action this reader does not know ({module.where(call)})")
        if "nargs" in keywords:
            value = keywords["nargs"]
            if not isinstance(value, ast.Constant):
                raise UnreadableParser(f"nargs not a literal ({module.where(call)})")
            nargs = value.value
        if kind == "BooleanOptionalAction":  # argparse adds each flag's --no- form
            flags += ["--no-" + f[2:] for f in flags if f.startswith("--")]
        choices = self.choices(module, keywords["choices"]) if "choices" in keywords else []
        return flags, nargs, kind, choices

    def walk(self, module: _Module, function: ast.FunctionDef, seen: set[tuple[str, str]], out: list[Action]) -> None:
        if (module.name, function.name) in seen:
            return
        seen.add((module.name, function.name))
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            if isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                out.append(self.action(module, node))
            elif isinstance(node.func, ast.Name) and (found := self.resolve(module, node.func.id)) is not None:
                self.walk(*found, seen, out)  # a helper that adds flags of its own (add_dataset_parser, ...)


def read_actions(root: Path) -> list[Action]:
    """Every action of `vllm bench serve`'s parser in the vLLM source under ``root`` (the folder holding
    ``vllm/``), in the order add_cli_args adds them."""
    reader = _Reader(root)
    serve = reader.module("vllm.benchmarks.serve")
    if "add_cli_args" not in serve.functions:
        raise UnreadableParser(f"no add_cli_args in {serve.path}")
    out: list[Action] = []
    reader.walk(serve, serve.functions["add_cli_args"], set(), out)
    return out
