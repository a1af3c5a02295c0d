"""An import-linter contract type: no import cycle among the given packages' modules, at any depth.

``acyclic_siblings`` compares siblings package by package; a cycle that runs through two root packages
(the trigger domain and the forges import each other's modules) is only seen module by module. Every
import grimp finds counts: inside functions and under ``TYPE_CHECKING`` too.
"""

from __future__ import annotations

from collections import deque

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def strongly_connected(nodes: set[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module, iteratively (the graph is deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def shortest_cycle(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """One shortest cycle through the component's first module: what to read to break it."""
    start, members = component[0], set(component)
    before: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(edges[node] & members):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(before[path[-1]])
                return [*reversed(path), start]
            if child not in before:
                before[child] = node
                queue.append(child)
    return component


class AcyclicModulesContract(Contract):
    type_name = "acyclic_modules"

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        roots = tuple(self.packages)  # type: ignore[call-overload]
        nodes = {m for m in graph.modules if m in roots or m.startswith(tuple(f"{r}." for r in roots))}
        edges = {m: graph.find_modules_directly_imported_by(m) & nodes for m in nodes}
        cycles = [shortest_cycle(c, edges) for c in strongly_connected(nodes, edges)]
        return ContractCheck(kept=not cycles, warnings=[], metadata={"cycles": cycles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for cycle in check.metadata["cycles"]:
            output.print_error("Import cycle: " + " -> ".join(cycle))
            output.new_line()
