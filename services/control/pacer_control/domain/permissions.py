"""Who may do what: ONE table from each action of the Control API to the least role allowed.

Roles are cumulative (operator < tech_admin < admin). Every route names its action; a test
walks every route of the OpenAPI document, so an endpoint without a rule here fails it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pacer_common.domain.tokens import Role, at_least

Action = Literal[
    "jobs.view", "jobs.pause", "jobs.resume", "jobs.cancel", "jobs.terminate", "jobs.budget", "jobs.approve",
    "shards.pause", "shards.resume",
    "items.view", "items.retry", "items.cancel", "items.release_lock", "items.resolve", "reports.view",
    "guids.health", "guids.leases", "guids.pause", "guids.resume", "guids.limits", "guids.release_lock",
    "locks.view", "audit.view", "requests.dry_run", "gateway.test_send",
    "tokens.view", "tokens.create", "tokens.revoke",
    "tenants.view", "tenants.manage", "dead_letters.view", "dead_letters.republish",
]


@dataclass(frozen=True)
class Rule:
    role: Role  # the least role allowed
    what: str  # completes "role 'operator' may not …"


O, T, A = Role.OPERATOR, Role.TECH_ADMIN, Role.ADMIN  # noqa: E741  # initials keep the table below one rule a line

RULES: dict[Action, Rule] = {
    "jobs.view": Rule(O, "view jobs"),
    "jobs.pause": Rule(O, "pause jobs"),
    "jobs.resume": Rule(O, "resume jobs"),
    "jobs.cancel": Rule(O, "cancel jobs"),
    "jobs.terminate": Rule(T, "terminate jobs"),
    "jobs.budget": Rule(A, "confirm send budgets"),
    "jobs.approve": Rule(A, "approve or reject jobs"),
    "shards.pause": Rule(O, "pause shards"),
    "shards.resume": Rule(O, "resume shards"),
    "items.view": Rule(O, "view items"),
    "items.retry": Rule(O, "retry items"),
    "items.cancel": Rule(O, "cancel items"),
    "items.resolve": Rule(T, "resolve in-doubt sends"),
    "reports.view": Rule(O, "download delivery reports"),
    "guids.health": Rule(O, "view guid health"),
    "guids.leases": Rule(T, "view guid leases"),
    "guids.pause": Rule(O, "pause guids"),
    "guids.resume": Rule(O, "resume guids"),
    "guids.limits": Rule(T, "change guid rate limits"),
    "guids.release_lock": Rule(A, "force-release guid leases"),
    "items.release_lock": Rule(A, "force-release item leases"),
    "locks.view": Rule(T, "view locks"),
    "audit.view": Rule(O, "view the audit log"),
    "requests.dry_run": Rule(O, "dry-run job requests"),
    "gateway.test_send": Rule(T, "send test messages"),
    "tokens.view": Rule(A, "list API tokens"),
    "tokens.create": Rule(A, "create API tokens"),
    "tokens.revoke": Rule(A, "revoke API tokens"),
    "tenants.view": Rule(T, "view tenants"),
    "tenants.manage": Rule(A, "create, change or delete tenants"),
    "dead_letters.view": Rule(O, "view dead letters"),
    "dead_letters.republish": Rule(T, "republish dead-lettered job requests"),
}

# What a token scoped to tenants may do at all: act on its tenants' jobs and their items
# (each route naming a job or an item is checked against the token's tenants), list jobs
# (filtered to its tenants), dry-run requests, and read and republish its tenants' dead
# letters (each record filtered by the tenant it names). Everything else spans tenants (guids,
# locks, the audit log, tokens, tenants) and is refused to it.
TENANT_ACTIONS: frozenset[Action] = frozenset({
    "jobs.view", "jobs.pause", "jobs.resume", "jobs.cancel", "jobs.terminate", "jobs.budget", "jobs.approve",
    "shards.pause", "shards.resume", "items.view", "items.retry", "items.cancel", "reports.view",
    "requests.dry_run", "dead_letters.view", "dead_letters.republish",
})

# Actions that decide which fields a response shows rather than whether a route may be called
# (GET /guids shows everyone health, and the lease view only to tech_admin and up).
FIELD_ACTIONS: frozenset[Action] = frozenset({"guids.leases"})


@dataclass(frozen=True)
class Principal:
    """Who is calling: the token's name and role, and the tenants it is scoped to (None: all)."""

    name: str
    role: Role
    tenants: frozenset[str] | None = None

    def sees(self, tenant: str | None) -> bool:
        """Whether this caller sees what belongs to ``tenant`` (None: a tenant that cannot be
        told, which only an unscoped caller sees)."""
        return self.tenants is None or (tenant is not None and tenant in self.tenants)

    @property
    def scope(self) -> str:
        return ", ".join(sorted(self.tenants or ()))

    @property
    def actor(self) -> str:
        """How the audit log names this caller."""
        return f"token:{self.name}"


def may(role: Role, action: Action) -> bool:
    return at_least(role, RULES[action].role)


def refusal(role: Role, action: Action) -> str | None:
    """Why ``role`` may not do ``action``, or None if it may."""
    rule = RULES[action]
    if at_least(role, rule.role):
        return None
    return f"role '{role.value}' may not {rule.what}; needs '{rule.role.value}'"


def scope_refusal(who: Principal, action: Action, lists: bool) -> str | None:
    """Why a token scoped to tenants may not do ``action`` here, or None. ``lists``: the route
    shows rows of many jobs (only GET /jobs filters them by tenant; the others are refused)."""
    if who.tenants is None:
        return None
    if action in TENANT_ACTIONS and not lists:
        return None
    return (f"token '{who.name}' is scoped to tenant(s) {who.scope}: it may not {RULES[action].what} "
            f"across tenants")
