"""Shared by the layering tests of arith/ and sweeps/: a module import graph has no cycle."""

from __future__ import annotations


def assert_acyclic(graph: dict[str, set[str]]) -> None:
    """Raise AssertionError naming the first cycle (``a -> b -> a``) of module -> imported."""
    done, path = set(), []

    def visit(module: str) -> None:
        if module in path:
            raise AssertionError(" -> ".join([*path[path.index(module) :], module]))
        if module in done:
            return
        path.append(module)
        for other in sorted(graph[module]):
            visit(other)
        path.pop()
        done.add(module)

    for module in sorted(graph):
        visit(module)
