"""Message templates: ``{name}`` fields filled from a target's vars.

One definition for everything that reads a template: the planner when it plans a job, the
control API when it dry-runs one. Each passes the error type its callers expect.
"""

from __future__ import annotations

from collections.abc import Mapping
from string import Formatter


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
