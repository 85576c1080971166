"""Message templates: ``{name}`` fields filled from a target's vars.

One definition for everything that reads a template: the planner when it plans a job, the
control API when it dry-runs one. Each passes the error type its callers expect.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from string import Formatter

from pacer_common.domain.requests import Target


def template_fields(template: str, error: type[Exception] = ValueError) -> list[str]:
    """The ``{name}`` fields of a template. Only plain names: no attributes, indexes or formats."""
    try:
        parsed = list(Formatter().parse(template))
    except ValueError as exc:
        raise error(f"message.content is not a valid template: {exc}") from None
    fields = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier() or spec or conversion:
            raise error(f"message.content: template field {{{name}}} must be a plain {{name}}")
        fields.append(name)
    return fields


def render(template: str, variables: Mapping[str, str]) -> str:
    """Fill ``{name}`` fields from the target's vars; a missing variable is an error, never blank."""
    return template.format_map(variables)


def render_targets(template: str, targets: Iterable[Target],
                   error: type[Exception] = ValueError) -> Iterator[tuple[Target, str]]:
    """Each target with its rendered content, in order. A (guid, to_id) given twice, or a
    template variable a target has no value for, raises ``error`` naming the positions."""
    seen: dict[tuple[str, str], int] = {}
    for pos, target in enumerate(targets):
        pair = (target.guid, target.to_id)
        if pair in seen:
            raise error(f"target guid={target.guid!r} to_id={target.to_id!r} appears twice "
                        f"(targets[{seen[pair]}] and targets[{pos}])")
        seen[pair] = pos
        try:
            content = render(template, target.vars)
        except KeyError as exc:
            raise error(f"targets[{pos}]: template variable {exc.args[0]!r} has no value") from None
        yield target, content
